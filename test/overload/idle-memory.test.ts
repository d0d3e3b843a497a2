// Memory handed back while quiet (src/overload/idle-memory.ts): one memory-reducing collection
// soon after start-up, then one after each burst that grew V8's heap, once a whole check is
// quiet; never while busy, never again while nothing grew, nothing after stop. Time is a fake
// clock; the heap and the event loop's busy share are what each step says they are.
import { getHeapSpaceStatistics } from 'node:v8'
import t, { type Test } from 'tap'
import { NODE_FLAGS } from '../../src/cli/shipped.js'
import { exposedGc } from '../../src/overload/memory-watch.js'
import { FIRST_CHECK_MS, IDLE_CHECK_MS, IDLE_UTILIZATION, loopUtilization, reducingCollection, REGROWN_BYTES, returnMemoryWhenIdle, USED_MAX_BYTES } from '../../src/overload/idle-memory.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'

const MiB = 2 ** 20

function idle (heapMiB = 30) {
  const time = fakeClock()
  const state = { heap: heapMiB * MiB, used: 12 * MiB, inFlight: 0, busy: 0, collections: 0, utilizationReads: 0 }
  const memory = returnMemoryWhenIdle({
    clock: time.clock,
    collect: () => { state.collections += 1; state.heap = 20 * MiB },
    heapBytes: () => state.heap,
    usedBytes: () => state.used,
    inFlight: () => state.inFlight,
    utilization: () => { state.utilizationReads += 1; return state.busy },
    collected: () => {}
  })
  return { time, state, memory }
}

t.test('soon after start-up, once quiet: one collection, then none while nothing grows', async (t) => {
  const { time, state, memory } = idle()
  memory.start()
  t.equal(state.collections, 0, 'not at start: /readyz answers first')
  await time.tick(FIRST_CHECK_MS - 1)
  t.equal(state.collections, 0, 'not before the first check')
  await time.tick(1)
  t.equal(state.collections, 1, 'at the first check')
  await time.tick(IDLE_CHECK_MS * 20)
  t.equal(state.collections, 1, 'an idle sidecar does not collect every check')
  memory.stop()
})

t.test('busy: no collection until a whole check is quiet', async (t) => {
  const { time, state, memory } = idle()
  state.busy = 0.5
  memory.start()
  await time.tick(FIRST_CHECK_MS + IDLE_CHECK_MS * 3)
  t.equal(state.collections, 0, 'none while busy')
  state.busy = IDLE_UTILIZATION
  await time.tick(IDLE_CHECK_MS)
  t.equal(state.collections, 0, 'at the share itself, still busy')
  state.busy = IDLE_UTILIZATION / 2
  await time.tick(IDLE_CHECK_MS)
  t.equal(state.collections, 1, 'the first quiet check')
  memory.stop()
})

t.test('after a burst that grew the heap: one collection at the first quiet check', async (t) => {
  const { time, state, memory } = idle()
  memory.start()
  await time.tick(FIRST_CHECK_MS)
  t.equal(state.collections, 1)
  // A burst: busy checks while the heap grows.
  state.busy = 0.9
  state.heap += REGROWN_BYTES
  await time.tick(IDLE_CHECK_MS * 2)
  t.equal(state.collections, 1, 'not during the burst')
  state.busy = 0
  await time.tick(IDLE_CHECK_MS)
  t.equal(state.collections, 2, 'once it is over')
  await time.tick(IDLE_CHECK_MS * 5)
  t.equal(state.collections, 2, 'and only once')
  // Growth short of REGROWN_BYTES is not worth a full collection.
  state.heap += REGROWN_BYTES - 1
  await time.tick(IDLE_CHECK_MS * 5)
  t.equal(state.collections, 2, `less than ${REGROWN_BYTES} bytes grown: none`)
  state.heap += 1
  await time.tick(IDLE_CHECK_MS)
  t.equal(state.collections, 3, `${REGROWN_BYTES} grown: one`)
  memory.stop()
})

t.test('a large heap in use, or a request in flight: no collection (the pause grows with the one, the other would wait)', async (t) => {
  const { time, state, memory } = idle()
  state.used = USED_MAX_BYTES + 1
  memory.start()
  await time.tick(FIRST_CHECK_MS + IDLE_CHECK_MS * 3)
  t.equal(state.collections, 0, 'over USED_MAX_BYTES in use: none')
  state.used = USED_MAX_BYTES
  state.inFlight = 1
  await time.tick(IDLE_CHECK_MS * 3)
  t.equal(state.collections, 0, 'a request in flight: none')
  state.inFlight = 0
  await time.tick(IDLE_CHECK_MS)
  t.equal(state.collections, 1, 'at USED_MAX_BYTES and nothing in flight: one')
  memory.stop()
})

t.test('each check judges only its own interval', async (t) => {
  const { time, state, memory } = idle()
  memory.start()
  t.equal(state.utilizationReads, 1, 'the interval starts at start()')
  await time.tick(FIRST_CHECK_MS + IDLE_CHECK_MS * 3)
  t.equal(state.utilizationReads, 5, 'read once per check, whatever it decides')
  memory.stop()
})

t.test('stop: no check after it, and a start after it does nothing', async (t) => {
  const { time, state, memory } = idle()
  memory.start()
  memory.start()
  memory.stop()
  await time.tick(FIRST_CHECK_MS + IDLE_CHECK_MS * 3)
  t.equal(state.collections, 0, 'stopped before the first check')
  memory.start()
  await time.tick(FIRST_CHECK_MS + IDLE_CHECK_MS * 3)
  t.equal(state.collections, 0, 'not started again')
  t.equal(time.fake.countTimers(), 0, 'no timer left')
})

t.test('V8\'s reducing collection shrinks a young generation that a burst grew', async (t) => {
  const youngBytes = (): number => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0
  // A burst of short-lived garbage grows the young generation towards its maximum.
  let keep = 0
  for (let i = 0; i < 400_000; i++) keep += JSON.stringify({ i, s: 'x'.repeat(64) }).length
  t.ok(keep > 0)
  const grown = youngBytes()
  reducingCollection()()
  t.ok(youngBytes() < grown, `young generation ${grown} → ${youngBytes()} bytes`)
})

t.test('the event loop\'s busy share: each call covers the interval since the last', async (t) => {
  const utilization = loopUtilization()
  t.equal(utilization(), 1, 'nothing to compare with at the first call')
  const spinUntil = performance.now() + 50
  while (performance.now() < spinUntil);
  t.ok(utilization() > 0.5, 'a spinning loop is busy')
  // Waiting on a timer is idle, however busy the machine: a descheduled waiting loop is still waiting.
  await new Promise((resolve) => setTimeout(resolve, 200))
  t.ok(utilization() < 0.5, 'a waiting loop is not')
})

t.test('by default the committed heap decides: the first quiet check always collects', async (t) => {
  const time = fakeClock()
  let collections = 0
  const memory = returnMemoryWhenIdle({ clock: time.clock, collect: () => { collections += 1 }, utilization: () => 0, usedBytes: () => 0 })
  memory.start()
  await time.tick(FIRST_CHECK_MS)
  t.equal(collections, 1)
  memory.stop()
})

t.test('V8\'s gc: the global one where node exposes it, a new context\'s only otherwise', async (t) => {
  const global = globalThis as { gc?: unknown }
  const before = global.gc
  t.teardown(() => { global.gc = before })
  const calls: unknown[] = []
  const exposed = (options?: unknown): void => { calls.push(options) }
  global.gc = exposed
  t.equal(exposedGc(), exposed, 'node started with --expose-gc: its global gc')
  reducingCollection()()
  t.same(calls, [{ type: 'major', execution: 'sync', flavor: 'last-resort' }])
  global.gc = undefined
  const fromContext = exposedGc()
  t.not(fromContext, exposed)
  t.equal(typeof fromContext, 'function', 'without it: the flag set at run time, gc from a new context')
  t.equal(global.gc, undefined, 'the main context\'s globals unchanged')
})

for (const [how, nodeArgs] of [['as `node dist/main.js`', []], ['with the shipped flags', [...NODE_FLAGS]]] as const) {
  t.test(`serve ${how}: one collection soon after the first token, counted on /metrics`, { skip: SKIP_UNDER_MUTATION }, async (t) => {
    await serveCollects(t, nodeArgs)
  })
}

async function serveCollects (t: Test, nodeArgs: readonly string[]): Promise<void> {
  const standIn = await startStandIn(t)
  const running = runMain(t, ['serve'], {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', LOG_LEVEL: 'debug'
  }, [...nodeArgs])
  const admin = (await running.waitFor(/"listener":"admin","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/))[1] ?? ''
  await running.waitFor(/access token acquired/)
  const line = await running.waitFor(/"heapBytes":\{"before":(\d+),"after":(\d+)\},"msg":"quiet: a memory-reducing collection returned/, 30_000)
  t.ok(Number(line[2]) < Number(line[1]), `the heap shrank: ${line[1]} → ${line[2]} bytes`)
  const seen = /^store_auth_proxy_idle_collections_total (\d+)$/m.exec(await (await fetch(`${admin}/metrics`)).text())?.[1]
  t.equal(seen, '1', 'one collection after start-up')
  running.child.kill('SIGTERM')
  t.equal(await running.exited, 0, 'stopped cleanly')
}
