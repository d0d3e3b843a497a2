// Unfinished heads where admission cannot see them: once private memory passes
// CONNECTION_WATER, the overload manager closes the connections holding one, oldest head first,
// each answered 503 OVERLOADED first, counted, the shedding gauge 1, logged once each way; idle
// keep-alives, requests under way and bodies still arriving after an early answer are left
// alone; a head pipelined behind a request is one; a head finished after its answer never
// reaches a route; the youngest KEPT_HEADS are kept, so a lone slow caller at rest begins
// nothing. Real sockets on port 0, private memory injected, a fake clock for the samples.
import { createServer } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { endOverloaded } from '../../src/overload/connection-gate.js'
import { CONNECTION_WATER, createOverloadManager, headsBound, KEPT_HEADS, PRIVATE_CLEAR, PRIVATE_HOLD_MS, SAMPLE_MS } from '../../src/overload/manager.js'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { stopReading } from '../../src/upstream/socket-internals.js'
import { startSidecar } from '../helpers/build.js'
import { recordingPeer as peer, type RecordingPeer } from '../helpers/raw-http.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import { metricValue } from '../helpers/metrics.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const LIMIT = 1024 * MiB
/** What each connection is counted for: the excess below makes one per sample. */
const COST = 100 * MiB
const over = (bytes: number): number => CONNECTION_WATER * LIMIT + bytes

async function setUp (t: Test, keptHeads = 0, cost = COST) {
  const { clock, tick } = fakeClock()
  const rss = { private: 40 * MiB }
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  /** Full collections forced. */
  const gc = { collections: 0 }
  const overload = createOverloadManager({ limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' }, maxInFlight: 0, clock, log: logs.log, metrics, readLiveBytes: () => 10 * MiB, readPrivateBytes: () => rss.private, collect: () => { gc.collections += 1 } })
  /** The URLs that reached a route; a request to /hold is answered only at the test's end. */
  const routed: string[] = []
  const held: Array<() => void> = []
  const server = createServer((req, res) => {
    routed.push(req.url ?? '')
    if (req.url === '/hold') held.push(() => res.end('held'))
    else res.end('ok')
  })
  const waiting = followWaiting(server, { answerHead: (socket) => { endOverloaded(socket, metrics) } })
  overload.closeWaitingOnMemory(waiting, cost, keptHeads)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const end of held) end()
    server.closeAllConnections()
    server.close()
  })
  overload.start()
  t.teardown(overload.stop)
  const shedCount = async (reason = 'memory_connections'): Promise<number> => (await metrics.registry.getSingleMetric('store_auth_proxy_overload_shed_total')!.get()).values.find((v) => v.labels.reason === reason)?.value ?? -1
  const gauge = async (): Promise<number> => (await metrics.registry.getSingleMetric('store_auth_proxy_overload_shedding')!.get()).values[0]?.value ?? -1
  return { server, waiting, rss, tick, logs, metrics, routed, held, overload, shedCount, gauge, gc }
}

t.test('over the water: unfinished heads answered 503 and closed, oldest first; idle and busy connections kept', async (t) => {
  const { server, waiting, rss, tick, logs, routed, overload, shedCount, gauge, gc } = await setUp(t)
  const idle = await peer(t, server, '')
  const oldest = await peer(t, server, 'GET /old HTTP/1.1\r\nHost: x\r\nX-Pad: aaaa')
  const busy = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\n')
  const kept = await peer(t, server, 'GET /done HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the keep-alive answered', () => kept.got().includes('ok'))
  const newer = await peer(t, server, 'GET /new HTTP/1.1\r\nHost: x\r\nX-Pad: bbbb')
  await eventually(t, 'two heads under way', () => waiting.heads() === 2)
  t.equal(await shedCount(), 0, 'the reason is exported before the first shed')

  rss.private = over(0)
  await tick(SAMPLE_MS)
  t.equal(waiting.heads(), 2, 'at the water, nothing closed')
  rss.private = over(1)
  await tick(SAMPLE_MS)
  await eventually(t, 'the oldest head closed', () => oldest.closed())
  t.match(oldest.got(), /^HTTP\/1\.1 503 Service Unavailable\r\n/)
  t.match(oldest.got(), /\r\nretry-after: 1\r\n/)
  t.match(oldest.got(), /\r\nconnection: close\r\n/)
  t.match(oldest.got(), /"error":"OVERLOADED"/)
  t.equal(newer.closed(), false, 'one per sample at this excess: the newer head waits')
  t.equal(overload.status().state, 'shedding')
  t.equal(await gauge(), 1, 'the shedding gauge says so')
  t.match(overload.readinessNote(), /unfinished head get 503 OVERLOADED/)

  await tick(SAMPLE_MS)
  await eventually(t, 'the newer head closed at the next sample', () => newer.closed())
  t.match(newer.got(), /^HTTP\/1\.1 503 /)
  await tick(SAMPLE_MS * 4)
  t.equal(await shedCount(), 2)
  t.notOk(idle.closed() || busy.closed() || kept.closed(), 'idle, busy and kept-alive connections left open')
  t.same(routed, ['/hold', '/done'])

  rss.private = over(-PRIVATE_CLEAR * LIMIT)
  await tick(SAMPLE_MS)
  t.same(logs.entries().map((e) => e.msg), [
    'overloaded: private memory near the limit, closing connections with an unfinished head, oldest first (503 OVERLOADED)',
    'private memory no longer near the limit: no longer closing unfinished heads'
  ], 'one line each way')
  t.match(logs.entries()[1], { closedHeads: 2 })
  t.equal(overload.status().state, 'normal')
  t.equal(await gauge(), 0)
  t.equal(gc.collections, 0, 'no collection while heads are closed')
  await tick(SAMPLE_MS)
  t.equal(gc.collections, 1, 'one full collection once the episode ends: the closed connections\' objects go')
})

t.test('stopReading: what a caller sends after it never reaches a route, though Node parses the socket from C++', async (t) => {
  const routed: string[] = []
  const server = createServer((req, res) => { routed.push(req.url ?? ''); res.end('ok') })
  // After Node's own listener, which set the parser reading the socket.
  const seen = new Promise<void>((resolve) => server.once('connection', (socket: Socket) => { stopReading(socket); resolve() }))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const a = connect((server.address() as AddressInfo).port, '127.0.0.1')
  t.teardown(() => { a.destroy() })
  await seen
  a.write('GET /stopped HTTP/1.1\r\nHost: x\r\n\r\n')
  // Written after the stopped one's whole request: once it is answered, the server's loop has seen both.
  const b = await peer(t, server, 'GET /read HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the other connection answered', () => b.got().includes('ok'))
  t.same(routed, ['/read'])
})

t.test('private memory that stays high at rest: the episode ends once nothing was closed for PRIVATE_HOLD_MS', async (t) => {
  const { server, waiting, rss, tick, logs, overload } = await setUp(t)
  const slow = await peer(t, server, 'GET /a HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'a head under way', () => waiting.heads() === 1)
  rss.private = over(MiB)
  await tick(SAMPLE_MS)
  await eventually(t, 'closed', () => slow.closed())
  await tick(PRIVATE_HOLD_MS)
  t.equal(overload.status().state, 'normal')
  t.equal(logs.entries().length, 2)
  const next = await peer(t, server, 'GET /b HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'a new head under way', () => waiting.heads() === 1)
  await tick(SAMPLE_MS)
  await eventually(t, 'a new head is closed again, in a new episode', () => next.closed())
  t.equal(logs.entries().length, 3)
})

t.test('the sidecar: the proxy listener behind its connection gate closes the oldest unfinished heads past the water, keeps the youngest; probes and scrapes keep working', async (t) => {
  const rss = { private: 40 * MiB }
  const upstream = await startUpstream(t)
  const { proxyUrl, adminUrl, logs } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(LIMIT), MAX_CONNECTIONS: '100' }, { memory: { readLiveBytes: () => 10 * MiB, readPrivateBytes: () => rss.private } })
  const { port } = new URL(proxyUrl)
  const heads: RecordingPeer[] = []
  // One at a time, each seen before the next: their heads begin in this order.
  for (let i = 0; i < KEPT_HEADS + 2; i++) {
    heads.push(await peer(t, Number(port), `GET /v2/store/slow-${i} HTTP/1.1\r\nHost: x\r\nX-Pad: aaaa`))
    t.equal((await fetch(`${proxyUrl}/v2/store/a`)).status, 200, 'below the water: served')
  }
  rss.private = over(MiB)
  await eventually(t, 'the two oldest closed', () => heads[0]!.closed() && heads[1]!.closed())
  t.match(heads[0]!.got(), /^HTTP\/1\.1 503 Service Unavailable\r\n[^]*"error":"OVERLOADED"/)
  t.equal((await fetch(`${adminUrl}/livez`)).status, 200, '/livez still answered')
  t.equal(heads.filter((h) => h.closed()).length, 2, `the youngest ${KEPT_HEADS} kept`)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'memory_connections' }), 2)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'OVERLOADED' }), 2)
  t.equal(logs.entries().filter((e) => /closing connections with an unfinished head/.test(String(e.msg))).length, 1, 'logged once')
  t.ok(upstream.received.every((r) => r.url === '/v2/store/a'), 'no shed head reached upstream')
})

t.test('a body still arriving after an early answer is no head: never closed, no second answer', async (t) => {
  const { server, waiting, rss, tick, routed, shedCount } = await setUp(t)
  const body = 'x'.repeat(4000)
  const up = await peer(t, server, `POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length * 10}\r\n\r\n${body}`)
  await eventually(t, 'answered early', () => up.got().includes('ok'))
  // The caller goes on sending its body (Node reads it to discard it, keeping the connection).
  up.socket.write(body)
  const control = await peer(t, server, 'GET /c HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'the control head seen', () => waiting.heads() === 1)
  rss.private = over(25 * MiB)
  for (let i = 0; i < 4; i++) {
    up.socket.write(body)
    await tick(SAMPLE_MS)
  }
  await eventually(t, 'the control closed', () => control.closed())
  t.equal(up.closed(), false, 'the upload is not closed')
  t.notMatch(up.got(), /503/, 'nor answered again')
  t.equal(await shedCount(), 1)
  t.same(routed, ['/orders'])
})

t.test('a head pipelined behind a request is one: closed as any other', async (t) => {
  const { server, waiting, rss, tick, held, shedCount } = await setUp(t)
  const pad = 'a'.repeat(12_000)
  const pipelined = await peer(t, server, `GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nX-Pad: ${pad}`)
  await eventually(t, 'the first request routed', () => held.length === 1)
  held[0]!()
  await eventually(t, 'answered', () => pipelined.got().includes('held'))
  t.equal(waiting.heads(), 1, 'its unfinished head counted')
  rss.private = over(1)
  await tick(SAMPLE_MS)
  await eventually(t, 'closed', () => pipelined.closed())
  t.match(pipelined.got(), /held[^]*HTTP\/1\.1 503 /, 'answered 503 after the first answer')
  t.equal(await shedCount(), 1)
})

t.test('oldest head first: a keep-alive that just began its next head goes after a slow head begun before', async (t) => {
  const { server, waiting, rss, tick } = await setUp(t)
  const pooled = await peer(t, server, 'GET /first HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'pooled answered', () => pooled.got().includes('ok'))
  const loris = await peer(t, server, 'GET /loris HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'the slow head seen', () => waiting.heads() === 1)
  pooled.socket.write('GET /second HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'two heads', () => waiting.heads() === 2)
  rss.private = over(1) // one head a sample at COST
  await tick(SAMPLE_MS)
  await eventually(t, 'one closed', () => pooled.closed() || loris.closed())
  t.equal(loris.closed(), true, 'the slow head, begun first, closed')
  t.equal(pooled.closed(), false, 'the pooled caller kept')
})

t.test(`over the water at rest: the youngest ${KEPT_HEADS} heads are kept, a lone slow head begins no episode, no log line, no collection`, async (t) => {
  // At 16 KiB a head, the bound on heads (headsBound) is far above these.
  const { server, waiting, rss, tick, logs, overload, gauge, gc, shedCount } = await setUp(t, KEPT_HEADS, 16 * 1024)
  rss.private = over(20 * MiB)
  const slow = await peer(t, server, 'GET /a HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'a head', () => waiting.heads() === 1)
  for (let i = 0; i < 8; i++) await tick(SAMPLE_MS)
  t.equal(slow.closed(), false)
  t.equal(overload.status().state, 'normal')
  t.equal(await gauge(), 0)
  t.same(logs.entries(), [], 'no log line')
  t.equal(gc.collections, 0, 'no collection')
  const more = await Promise.all(Array.from({ length: KEPT_HEADS + 1 }, async () => await peer(t, server, 'GET /b HTTP/1.1\r\nHost: x\r\n')))
  await eventually(t, 'all heads seen', () => waiting.heads() === KEPT_HEADS + 2)
  await tick(SAMPLE_MS)
  await eventually(t, 'two closed', async () => await shedCount() === 2)
  await eventually(t, 'the two oldest', () => slow.closed() && more[0]!.closed())
  t.equal(more.filter((p) => p.closed()).length, 1, 'the youngest kept')
})

t.test('unfinished heads bounded in number by the limit: one beyond the bound closes the oldest at once, counted, logged once', async (t) => {
  const { server, waiting, logs, routed, shedCount } = await setUp(t)
  const max = headsBound(LIMIT, COST)
  t.equal(max, 4, 'at 100 MiB a head, what fits under HEADS_WATER of 1 GiB beside an idle sidecar')
  const heads: RecordingPeer[] = []
  for (let i = 0; i < max; i++) heads.push(await peer(t, server, `GET /h${i} HTTP/1.1\r\nHost: x\r\n`))
  await eventually(t, 'all heads seen', () => waiting.heads() === max)
  const whole = await peer(t, server, 'GET /whole HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'a whole head served beside them', () => whole.got().includes('ok'))
  t.equal(await shedCount('heads'), 0, 'at the bound, nothing closed')
  const beyond = [await peer(t, server, 'GET /b1 HTTP/1.1\r\nHost: x\r\n'), await peer(t, server, 'GET /b2 HTTP/1.1\r\nHost: x\r\n')]
  await eventually(t, 'the two oldest closed', () => heads[0]!.closed() && heads[1]!.closed())
  t.match(heads[0]!.got(), /^HTTP\/1\.1 503 Service Unavailable\r\n/)
  t.equal(heads.filter((h) => h.closed()).length + beyond.filter((b) => b.closed()).length, 2, 'the rest kept')
  t.equal(waiting.heads(), max)
  t.equal(await shedCount('heads'), 2)
  t.equal(await shedCount(), 0, 'not on memory')
  t.equal(logs.entries().filter((e) => /at the bound of unfinished request heads/.test(String(e.msg))).length, 1, 'one warn')
  t.same(routed, ['/whole'])
})
