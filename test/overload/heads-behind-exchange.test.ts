// A head pipelined behind an exchange under way (its request admitted and forwarded upstream,
// not yet answered) is never shed, by the bound on unfinished heads nor by the memory backstop:
// a 503 written there would be read as that request's answer (an order TI got, retried by a
// caller without an idempotency key: placed twice), or land inside a body being streamed.
// Found by an outside review; each test failed before.
import { createServer } from 'node:http'
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { endOverloaded } from '../../src/overload/connection-gate.js'
import { createOverloadManager, headsBound } from '../../src/overload/manager.js'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { recordingPeer as peer } from '../helpers/raw-http.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

const MiB = 1024 * 1024
const LIMIT = 100 * MiB
const COST = 10 * MiB

async function setUp (t: Test) {
  const { clock } = fakeClock()
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  const overload = createOverloadManager({ limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' }, maxInFlight: 0, clock, log: logs.log, metrics, readLiveBytes: () => 10 * MiB, readPrivateBytes: () => 40 * MiB, collect: () => {} })
  const routed: string[] = []
  const held: Array<() => void> = []
  const server = createServer((req, res) => {
    routed.push(`${req.method} ${req.url}`)
    req.resume()
    if (req.url === '/hold') held.push(() => res.end('{"order":"accepted"}'))
    else res.end('ok')
  })
  const waiting = followWaiting(server, { answerHead: (socket) => { endOverloaded(socket, metrics) } })
  overload.closeWaitingOnMemory(waiting, COST)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const end of held) end(); server.closeAllConnections(); server.close() })
  return { server, waiting, routed, held, logs }
}

t.test('a POST in flight, its pipelined next head unfinished, a flood past the bound: the POST gets its own answer', async (t) => {
  const { server, waiting, routed, held } = await setUp(t)
  const max = headsBound(LIMIT, COST)
  // An honest pipelining client: the POST, whole, then the next request, whose head is still on its way.
  const client = await peer(t, server, 'POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /next HTTP/1.1\r\nHost: x\r\nX-Pad: aaaa')
  await eventually(t, 'the POST routed (forwarded upstream)', () => held.length === 1)
  await eventually(t, 'its next head held, apart from the bound', () => waiting.status().heldHeads === 1 && waiting.heads() === 0)
  // A flood of slow heads: max of them, one past the bound.
  for (let i = 0; i < max; i++) await peer(t, server, `GET /f${i} HTTP/1.1\r\nHost: x\r\n`)
  await eventually(t, 'the bound applied: others closed', () => waiting.heads() <= max, 10_000)
  t.notOk(client.closed(), 'the caller\'s connection stays open')
  // The upstream's answer to the POST arrives after.
  held[0]!()
  await eventually(t, 'the POST answered', () => client.got().includes('{"order":"accepted"}'), 10_000)
  t.comment(`routed: ${JSON.stringify(routed.slice(0, 2))}`)
  t.match(client.got(), /^HTTP\/1\.1 200 /, 'the first status line the caller reads is its POST\'s own answer')
  t.match(client.got(), /^HTTP\/1\.1 200 [^]*\{"order":"accepted"\}(HTTP\/1\.1 503 [^]*)?$/, 'a 503, if any, only after it: the pipelined request\'s own, its head unfinished')
})

t.test('an answer being streamed, a pipelined head unfinished, a flood past the bound: no 503 inside the body', async (t) => {
  const logs = captureLogs()
  const { clock } = fakeClock()
  const metrics = createMetrics({ defaultMetrics: false })
  const overload = createOverloadManager({ limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' }, maxInFlight: 0, clock, log: logs.log, metrics, readLiveBytes: () => 10 * MiB, readPrivateBytes: () => 40 * MiB, collect: () => {} })
  let streaming: (() => void) | undefined
  const server = createServer((req, res) => {
    if (req.url === '/download') {
      res.writeHead(200, { 'content-length': 20 })
      res.write('0123456789')
      streaming = () => res.end('abcdefghij')
    } else res.end('ok')
  })
  const waiting = followWaiting(server, { answerHead: (socket) => { endOverloaded(socket, metrics) } })
  overload.closeWaitingOnMemory(waiting, COST)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const client = await peer(t, server, 'GET /download HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nX-Pad: a')
  await eventually(t, 'half the body read', () => client.got().includes('0123456789'))
  await eventually(t, 'its next head held, apart from the bound', () => waiting.status().heldHeads === 1 && waiting.heads() === 0)
  for (let i = 0; i < headsBound(LIMIT, COST); i++) await peer(t, server, `GET /f${i} HTTP/1.1\r\nHost: x\r\n`)
  await eventually(t, 'the bound applied: others closed', () => waiting.heads() <= headsBound(LIMIT, COST), 10_000)
  streaming?.()
  await eventually(t, 'the body whole', () => client.got().includes('abcdefghij'), 10_000)
  t.match(client.got(), /^HTTP\/1\.1 200 [^]*\r\n\r\n0123456789abcdefghij/, 'the answer whole, nothing written inside its body')
  t.match(client.got(), /^HTTP\/1\.1 200 [^]*0123456789abcdefghij(HTTP\/1\.1 503 [^]*)?$/, 'a 503, if any, only after it: the pipelined request\'s own')
})

t.test('the memory backstop: the same POST in flight, its pipelined head the oldest, private memory over the water', async (t) => {
  const { clock, tick } = fakeClock()
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  const rss = { private: 40 * MiB }
  const overload = createOverloadManager({ limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' }, maxInFlight: 0, clock, log: logs.log, metrics, readLiveBytes: () => 10 * MiB, readPrivateBytes: () => rss.private, collect: () => {} })
  const held: Array<() => void> = []
  const server = createServer((req, res) => { req.resume(); if (req.url === '/hold') held.push(() => res.end('{"order":"accepted"}')); else res.end('ok') })
  const waiting = followWaiting(server, { answerHead: (socket) => { endOverloaded(socket, metrics) } })
  overload.closeWaitingOnMemory(waiting, 16 * 1024) // KEPT_HEADS 64 kept; the bound 640, out of the way
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  overload.start()
  t.teardown(() => { overload.stop(); for (const end of held) end(); server.closeAllConnections(); server.close() })
  const client = await peer(t, server, 'POST /hold HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /next HTTP/1.1\r\nHost: x\r\nX-Pad: aaaa')
  await eventually(t, 'routed', () => held.length === 1)
  for (let i = 0; i < 65; i++) await peer(t, server, `GET /f${i} HTTP/1.1\r\nHost: x\r\n`)
  await eventually(t, '65 heads, and the caller\'s held', () => waiting.heads() === 65 && waiting.status().heldHeads === 1)
  rss.private = 0.6 * LIMIT + 1
  await tick(250)
  await eventually(t, 'one head closed, not the caller\'s', () => waiting.heads() === 64, 10_000)
  t.notOk(client.closed(), 'the caller\'s connection stays open')
  held[0]!()
  await eventually(t, 'the POST answered', () => client.got().includes('{"order":"accepted"}'), 10_000)
  t.match(client.got(), /^HTTP\/1\.1 200 /, 'its own answer, not 503')
})
