// A chunked body may end in a trailer section, which Node's parser holds as it holds a head (up
// to MAX_HEADER_BYTES) while the request is in flight: unfinished, it grew unseen (100 requests
// each with an unfinished 1 MB trailer OOM-killed a 128 MiB sidecar at MAX_HEADER_BYTES 1 MiB).
// Admission counts it for each chunked request, as an unfinished head (headCost); the bodies
// of shed ones, read to be discarded, are read at most keptHeads at once, the rest closed.
import { EventEmitter } from 'node:events'
import type { IncomingMessage } from 'node:http'
import { connect } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { boundChunkedDiscards, trailerCost } from '../../src/overload/admission.js'
import { REQUEST_COST } from '../../src/overload/manager.js'
import { headCost, keptHeads } from '../../src/overload/waters.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startStalledUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024

t.test('a chunked request counts an unfinished head for its trailers; others none', async (t) => {
  t.equal(trailerCost({ headers: { 'transfer-encoding': 'chunked' } }, headCost(16_384, 100)), headCost(16_384, 100))
  t.equal(trailerCost({ headers: { 'transfer-encoding': 'chunked' } }, headCost(MiB, 100)), headCost(MiB, 100))
  t.equal(trailerCost({ headers: { 'content-length': '2' } }, headCost(MiB, 100)), 0)
  t.equal(trailerCost({ headers: {} }, headCost(MiB, 100)), 0)
})

t.test('a sidecar: a chunked POST in flight is counted its trailers, a POST of the same body not', async (t) => {
  const upstream = await startStalledUpstream(t)
  t.teardown(upstream.releaseAll)
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(128 * MiB), MAX_HEADER_BYTES: String(MiB) }, {
    memory: { readLiveBytes: () => 20 * MiB, readPrivateBytes: () => 40 * MiB, collectGarbage: () => {} }
  })
  const costInFlight = async (): Promise<number> =>
    ((await (await request(adminUrl + '/status')).body.json()) as { overload: { inFlightCostBytes: number } }).overload.inFlightCostBytes
  const { port } = new URL(proxyUrl)
  const send = (bytes: string): void => {
    const socket = connect(Number(port), '127.0.0.1')
    socket.on('error', () => {})
    t.teardown(() => { socket.destroy() })
    socket.write(bytes)
  }
  send('POST /v2/store/sized HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}')
  await eventually(t, 'the sized POST upstream', () => upstream.received.length === 1)
  const sized = await costInFlight()
  t.ok(sized >= REQUEST_COST && sized < REQUEST_COST + 8192, `${sized} bytes`)
  // Its body sent but the trailer section not begun: what it may still hold is counted already.
  send('POST /v2/store/chunked HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n')
  await eventually(t, 'the chunked POST upstream', () => upstream.received.length === 2)
  const both = await costInFlight()
  t.ok(both - sized >= REQUEST_COST + headCost(MiB, 100), `${both - sized} bytes for the chunked POST: its trailers counted as a head of MAX_HEADER_BYTES`)
})

t.test('chunked requests shed: their bodies read to be discarded up to keptHeads at once, beyond that closed after the 503; a sized one kept', async (t) => {
  const upstream = await startStalledUpstream(t)
  t.teardown(upstream.releaseAll)
  // At MAX_HEADER_BYTES 1 MiB, one head of it is kept (keptHeads): one shed chunked body read at once.
  t.equal(keptHeads(headCost(MiB, 100)), 1)
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_IN_FLIGHT_REQUESTS: '1', MAX_HEADER_BYTES: String(MiB) })
  const { port } = new URL(proxyUrl)
  const open = async (bytes: string) => {
    const socket = connect(Number(port), '127.0.0.1')
    socket.on('error', () => {})
    t.teardown(() => { socket.destroy() })
    let got = ''
    let closed = false
    socket.on('data', (chunk: Buffer) => { got += chunk.toString('latin1') })
    socket.on('close', () => { closed = true })
    socket.write(bytes)
    return { got: () => got, closed: () => closed }
  }
  await open('GET /v2/store/held HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'one in flight, held', () => upstream.received.length === 1)
  const chunkedPost = 'POST /v2/store/c HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n'
  const first = await open(chunkedPost)
  await eventually(t, 'the first chunked POST answered', () => first.got().includes('OVERLOADED'))
  t.match(first.got(), /^HTTP\/1\.1 503 [^]*\r\nconnection: keep-alive\r\n/i, 'its body read on, the connection kept')
  const second = await open(chunkedPost)
  await eventually(t, 'the second answered and its connection closed', () => second.closed())
  t.match(second.got(), /^HTTP\/1\.1 503 [^]*\r\nconnection: close\r\n/i)
  const sized = await open('POST /v2/store/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}')
  await eventually(t, 'the sized POST answered', () => sized.got().includes('OVERLOADED'))
  t.match(sized.got(), /^HTTP\/1\.1 503 [^]*\r\nconnection: keep-alive\r\n/i, 'kept for a retry')
  t.notOk(sized.closed())
})

t.test('the bound on shed chunked bodies read at once: counted until each request closes', async (t) => {
  const bound = boundChunkedDiscards(2)
  const requests = [new EventEmitter(), new EventEmitter(), new EventEmitter()] as unknown as IncomingMessage[]
  t.same(requests.map((req) => bound.begin(req)), [true, true, false])
  requests[0]!.emit('close')
  t.equal(bound.reading(), 1)
  t.equal(bound.begin(requests[2]!), true, 'room again once one closed')
})
