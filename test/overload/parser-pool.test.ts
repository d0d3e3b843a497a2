// A closed connection's HTTP parser leaves Node's pool (waiting-connections.ts, socket-internals.ts
// unpoolParser): pooled, it kept the copies of the header values it had read in pieces, a closed
// head's included, up to MAX_HEADER_BYTES each (100 closed heads of 600 KB kept 58 MiB of private
// memory in a plain server, after a full collection), so closing heads on memory freed nothing.
// A parser in use is never touched. Real sockets on port 0.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { createRequire } from 'node:module'
import type { Socket } from 'node:net'
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { endOverloaded } from '../../src/overload/connection-gate.js'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { httpParserOf, unpoolParser } from '../../src/upstream/socket-internals.js'
import { eventually } from '../helpers/eventually.js'
import { recordingPeer as peer } from '../helpers/raw-http.js'

const { parsers } = createRequire(import.meta.url)('_http_common') as { parsers: { list: unknown[] } }
const pooled = (parser: object | null | undefined): boolean => parsers.list.includes(parser)
/** A header value sent in two writes: Node's parser copies what the first brought, and holds the copy. */
const PAD = 'a'.repeat(64 * 1024)

async function setUp (t: Test) {
  const metrics = createMetrics({ defaultMetrics: false })
  const server = createServer({ maxHeaderSize: 1024 * 1024 }, (_req: IncomingMessage, res: ServerResponse) => { res.end('ok') })
  const waiting = followWaiting(server, { answerHead: (socket) => { endOverloaded(socket, metrics) } })
  /** The server side of each connection, in the order they came, and whether each closed. */
  const sockets: Socket[] = []
  const closed = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    sockets.push(socket)
    socket.once('close', () => { closed.add(socket) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return { server, waiting, sockets, closed }
}

t.test('heads closed by their caller or shed, a head read in pieces then answered: no parser of theirs pooled; one in use kept', async (t) => {
  const { server, waiting, sockets, closed } = await setUp(t)
  const kept = await peer(t, server, 'GET /kept HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the keep-alive answered', () => kept.got().includes('ok'))
  const left = await peer(t, server, `GET /left HTTP/1.1\r\nHost: x\r\nX-Pad: ${PAD}`)
  const shed = await peer(t, server, `GET /shed HTTP/1.1\r\nHost: x\r\nX-Pad: ${PAD}`)
  const whole = await peer(t, server, `GET /whole HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: ${PAD}`)
  await eventually(t, 'three heads under way', () => waiting.heads() === 3)
  for (const p of [left, shed, whole]) p.socket.write(PAD)
  const [, leftSide, shedSide, wholeSide] = sockets.map(httpParserOf)

  left.socket.destroy()
  await eventually(t, 'the head its caller left closed', () => closed.has(sockets[1]!))
  t.equal(waiting.shedHeads(1), 1, 'the oldest head left shed')
  await eventually(t, 'the shed head closed', () => shed.closed() && closed.has(sockets[2]!))
  t.match(shed.got(), /^HTTP\/1\.1 503 /)
  whole.socket.write('\r\n\r\n')
  await eventually(t, 'the head read in pieces answered, its connection closed', () => whole.got().includes('ok') && closed.has(sockets[3]!))

  t.notOk(pooled(leftSide), 'the parser of the head its caller left is not pooled')
  t.notOk(pooled(shedSide), 'nor that of the head shed')
  t.notOk(pooled(wholeSide), 'nor that of the head read in pieces, answered')
  // Closed, not only unpooled: a parser out of the pool and never closed is never collected.
  await new Promise((resolve) => setImmediate(resolve))
  const buffered = (parser: unknown): unknown => (parser as { getCurrentBuffer: () => unknown }).getCurrentBuffer()
  for (const parser of [leftSide, shedSide, wholeSide]) t.equal(buffered(parser), undefined, 'its parser closed')
  t.not(buffered(httpParserOf(sockets[0]!)), undefined, 'the one in use open')
  t.notOk(unpoolParser(httpParserOf(sockets[0]!)), 'a parser in use is not pooled, and left alone')
  kept.socket.write('GET /again HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the keep-alive answered again', () => kept.got().split('ok').length === 3)
})

t.test('unpoolParser: a parser Node did not pool, or none, is left alone', async (t) => {
  t.notOk(unpoolParser(undefined))
  t.notOk(unpoolParser(null))
  t.notOk(unpoolParser({}))
})
