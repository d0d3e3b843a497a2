// A chunked body may end in a trailer section, which Node's parser holds as it holds a head (up
// to MAX_HEADER_BYTES) while the request is in flight: unfinished, it grew unseen (100 requests
// each with an unfinished 1 MB trailer OOM-killed a 128 MiB sidecar at MAX_HEADER_BYTES 1 MiB).
// Admission counts it for each chunked request, as an unfinished head (headCost).
import { connect } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { trailerCost } from '../../src/overload/admission.js'
import { REQUEST_COST } from '../../src/overload/manager.js'
import { headCost } from '../../src/overload/waters.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startStalledUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024

t.test('a chunked request counts an unfinished head for its trailers; others none', async (t) => {
  t.equal(trailerCost({ headers: { 'transfer-encoding': 'chunked' } }, 16_384, 100), headCost(16_384, 100))
  t.equal(trailerCost({ headers: { 'transfer-encoding': 'chunked' } }, MiB, 100), headCost(MiB, 100))
  t.equal(trailerCost({ headers: { 'content-length': '2' } }, MiB, 100), 0)
  t.equal(trailerCost({ headers: {} }, MiB, 100), 0)
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
