// The edges of deciding without Redis, each at its exact tick: the bound on spending alone on
// either clock and what /status says of it, a fleet of one waiting out an earlier run's window,
// a share of 0, the first heartbeat timing out, a young tally's grace, and a first connection to
// a Redis still loading its data. (The scripted Redis: fleet-double.ts.)
import { once } from 'node:events'
import { createServer, type AddressInfo, type Socket } from 'node:net'
import t from 'tap'
import { openRedis } from '../../src/redis/connection.js'
import { cutOffUntilAlone, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const CLOSED = new Error('Connection is closed.')
/** How long after the last presence-renewing script a sidecar alone waits, for a 1 s window. */
const AFTER_MS = TIMEOUT_MS + TIMING.presenceTtlMs + 1_000
const BOUND_MS = 5_000
const ENDED = { kind: 'degraded', ms: TIMING.heartbeatMs, aloneEnded: true }

t.test('the bound on spending alone is reached at its exact tick by either clock, whatever the other says', async (t) => {
  type Fleet = Awaited<ReturnType<typeof scriptedFleet>>
  const cases = [
    // The wall clock stepped back as far as time runs: the monotonic clock alone moves.
    { name: 'monotonic', move: async (f: Fleet, ms: number) => { f.c.stepWall(-ms); await f.c.tick(ms) } },
    // Suspended: the monotonic clock stands still, the wall clock alone moves.
    { name: 'wall', move: async (f: Fleet, ms: number) => { f.c.suspend(ms) } }
  ]
  for (const { name, move } of cases) {
    const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS })
    await cutOffUntilAlone(f)
    // The bound counts from the last heartbeat's send, AFTER_MS ago on both clocks.
    await move(f, BOUND_MS - AFTER_MS - 1)
    t.match(await f.take(), { kind: 'ok', alone: true }, `${name}: 1 ms within the bound, the share`)
    t.notOk(f.store.status().aloneEnded, `${name}: /status says spending alone goes on`)
    await move(f, 1)
    t.same(await f.take(), ENDED, `${name}: the bound reached, refused`)
    t.ok(f.store.status().aloneEnded, `${name}: /status says so`)
  }
})

t.test('/status says aloneEnded only of a sidecar deciding alone after Redis counted it present', async (t) => {
  const never = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS, before: (s) => { s.down = CLOSED } })
  await never.c.tick(2 * BOUND_MS)
  t.match(never.store.status(), { state: 'connecting', aloneEnded: false }, 'never reached Redis: its budgets wait for Redis, no bound ran out')
  t.same(await never.take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'and its takes say the same')

  const shared = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS })
  await shared.c.tick(1_000)
  shared.double.script.down = new Error('Command timed out')
  await shared.c.tick(2 * BOUND_MS)
  t.match(shared.store.status(), { state: 'shared', aloneEnded: false }, 'heartbeats late past the bound: still shared, nothing decided alone')
  t.same(await shared.take(), ENDED, 'control: a take late too, it decides alone, past the bound')
  t.match(shared.store.status(), { state: 'degraded', aloneEnded: true })
})

t.test('a declared fleet of one cut off within a window of its start waits out that window (an earlier run may have spent in it), then spends its whole budget', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 3/10s', { fleetFloor: 1, aloneMaxMs: 9_000, before: (s) => { s.fleetSize = 1; s.present = 1 } })
  const bornAt = f.c.clock.now()
  await f.c.tick(2_000)
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  t.same(await f.take(), { kind: 'degraded', ms: 8_000 }, 'until a window after its start')
  await f.c.tick(bornAt + 10_000 - 1 - f.c.clock.now())
  t.same(await f.take(), { kind: 'degraded', ms: 1 })
  await f.c.tick(1)
  for (let i = 0; i < 2; i++) t.match(await f.take(), { kind: 'ok', alone: true }, `send ${i + 1}: its ledger is the whole tally`)
  const last = await f.store.take(f.rule.id, f.rule.limits)
  t.match(last, { kind: 'ok', alone: true }, 'send 3, not left yet')
  t.same(await f.take(), { kind: 'degraded', ms: 10_000 }, 'then its ledger\'s wait')
  // The last heartbeat was sent at 2 s: the 9 s bound ends at 11 s, before send 3 leaves.
  await f.c.tick(1_000)
  t.same(f.store.leaving(f.rule.id, f.rule.limits, last.kind === 'ok' ? last.id : ''), { reason: 'degraded', ms: TIMING.heartbeatMs, aloneEnded: true },
    'decided alone, leaving past the bound: refused')
})

t.test('a share of 0 (a limit smaller than the fleet) is refused for a heartbeat while cut off, even a tick before the window: it would be refused again then', async (t) => {
  for (const [rules, ms] of [['GET /a 1/1s', TIMING.heartbeatMs], ['GET /a 2/1s', 1]] as const) {
    const f = await scriptedFleet(t, rules)
    await f.c.tick(5_050)
    await f.c.tick(0)
    const lastSent = f.c.clock.now() - 50
    f.double.script.down = CLOSED
    f.double.emit(false, CLOSED)
    await f.c.tick(lastSent + AFTER_MS - 1 - f.c.clock.now())
    t.same(await f.take(), { kind: 'degraded', ms }, `${rules}: share ${ms === 1 ? '1 (control): its wait for the window' : '0: a heartbeat'}`)
    await f.c.tick(1)
    t.match(await f.take(), { kind: ms === 1 ? 'ok' : 'degraded' }, `${rules}: the window passed`)
  }
})

t.test('the very first heartbeat timing out is sent again at once, once, as any later one', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  f.double.script.down = new Error('Command timed out')
  await f.c.tick(TIMING.heartbeatMs)
  // At once: the fake clock fires a timer of 0 ms set while it ticks 1 ms later.
  await f.c.tick(1)
  t.equal(f.double.count('heartbeat'), 2, 'timed out: again at once')
  await f.c.tick(TIMING.heartbeatMs - 1)
  t.equal(f.double.count('heartbeat'), 2)
  await f.c.tick(1)
  t.equal(f.double.count('heartbeat'), 3, 'then at its pace')
  t.equal(f.store.status().state, 'shared', 'a late heartbeat changes nothing by itself')
})

t.test('a young tally\'s grace runs to its end: a reassertion within it that meets a tally old enough to trust does not cut it short', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s', { timing: { freshGraceMs: 3_000 }, before: (s) => { s.reassert = () => ({ epochAgeMs: 1_000 }) } })
  t.match(f.store.status(), { state: 'settling', starting: true })
  await f.c.tick(500)
  // The connection drops and comes back to a tally exactly freshGraceMs old (another Redis).
  f.double.script.reassert = () => ({ epoch: 'e:2', epochAgeMs: 3_000 })
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  f.double.script.down = undefined
  f.double.emit(true)
  await f.c.tick(0)
  t.equal(f.double.count('reassert'), 2, 'the ledger was told again')
  t.match(f.store.status(), { state: 'settling', starting: true }, 'still settling on its first contact: /readyz held')
  t.same(await f.take(), { kind: 'degraded', ms: 1_500, lost: true }, 'every budget held for the rest of the first grace')
  await f.c.tick(1_500)
  t.match(await f.take(), { kind: 'ok' })
  t.match(f.store.status(), { state: 'shared', starting: false })
})

/** The names of the whole commands at the start of `buffer` (RESP arrays of bulk strings), and what is left of it. */
function commands (buffer: string): { names: string[], rest: string } {
  const names: string[] = []
  let at = 0
  for (;;) {
    const head = /^\*(\d+)\r\n/.exec(buffer.slice(at))
    if (head === null) return { names, rest: buffer.slice(at) }
    let p = at + head[0].length
    const args: string[] = []
    for (let i = 0; i < Number(head[1]); i++) {
      const bulk = /^\$(\d+)\r\n/.exec(buffer.slice(p))
      if (bulk === null || buffer.length < p + bulk[0].length + Number(bulk[1]) + 2) return { names, rest: buffer.slice(at) }
      p += bulk[0].length
      args.push(buffer.slice(p, p + Number(bulk[1])))
      p += Number(bulk[1]) + 2
    }
    names.push(args.join(' ').toLowerCase())
    at = p
  }
}

/** A Redis loading its data set: it answers, INFO says `loading:1` (as a real one loading a large RDB), every time it is asked. */
function loadingRedis (socket: Socket): void {
  let buffer = ''
  socket.on('data', (data) => {
    const read = commands(buffer + data.toString())
    buffer = read.rest
    for (const name of read.names) {
      const info = 'loading:1\r\nloading_eta_seconds:1\r\n'
      if (name.startsWith('info')) socket.write(`$${info.length}\r\n${info}\r\n`)
      else if (name.startsWith('hello')) socket.write('-ERR unknown command \'hello\'\r\n')
      else socket.write('+OK\r\n')
    }
  })
}

t.test('a first connection to a Redis that answers but is still loading gives up within the bound: false, not a hang', async (t) => {
  const sockets = new Set<Socket>()
  const server = createServer((socket) => { sockets.add(socket); loadingRedis(socket) }).listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { for (const socket of sockets) socket.destroy(); server.close() })
  const connection = openRedis({ url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`, timeoutMs: 1_000 })
  connection.client.on('error', () => {})
  t.teardown(() => { connection.client.disconnect() })
  // A bound of its own, well past connect()'s (1 s at least): a hang fails here, not at tap's timeout.
  let timer: NodeJS.Timeout | undefined
  const hung = new Promise<'hung'>((resolve) => { timer = setTimeout(() => { resolve('hung') }, 10_000) })
  const up = await Promise.race([connection.connect(), hung])
  clearTimeout(timer)
  t.equal(up, false, 'not up: the store starts cut off and asks again every heartbeat')
  t.equal(connection.client.status, 'connect', 'connected, still waiting for Redis to be ready: only connect()\'s own bound answered')
})
