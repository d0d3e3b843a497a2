// What the proxy listener answers before any route, as the caller and the operator see it: a
// head that is not HTTP counted and logged under the method it did not name, CONNECT under its
// own, a caller that closed mid-head neither answered nor counted, and Fastify's own
// per-request lines never written (the access line is the sidecar's).
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { rawRequest, recordingPeer, statusOf } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

async function sidecar (t: Test, env: Record<string, string> = { ACCESS_LOG: 'true' }) {
  const upstream = await startUpstream(t)
  const s = await startSidecar(t, upstream.url, env)
  return { ...s, accessLines: () => s.logs.entries().filter((e) => e.msg === 'request') }
}

const exchanges = (method: string, statusClass: string) =>
  seriesKey('store_auth_proxy_requests_total', { method, status_class: statusClass, outcome: 'completed' })

t.test('a head that is not HTTP: a 400, counted and logged under no method, whatever it spells later', async (t) => {
  const s = await sidecar(t)
  // Lower case is no method; the upper-case word after it is not the request's either.
  t.equal(statusOf(await rawRequest(s.proxyUrl, 'foo GET / HTTP/1.1\r\nHost: a\r\n\r\n')), 400)
  t.match(s.accessLines(), [{ level: 30, method: 'OTHER', statusCode: 400, outcome: 'completed', error: 'BAD_REQUEST' }])
  const m = await scrapeSettled(s.adminUrl)
  t.equal(m.get(exchanges('OTHER', '4xx')), 1)
  t.equal(m.get(exchanges('GET', '4xx')), undefined)
})

t.test('with ACCESS_LOG off, a head refused by the parser is counted, not logged', async (t) => {
  const s = await sidecar(t, {})
  t.equal(statusOf(await rawRequest(s.proxyUrl, 'foo / HTTP/1.1\r\n\r\n')), 400)
  t.equal((await scrapeSettled(s.adminUrl)).get(exchanges('OTHER', '4xx')), 1)
  t.same(s.accessLines(), [])
})

t.test('CONNECT is refused and logged as CONNECT', async (t) => {
  const s = await sidecar(t)
  t.equal(statusOf(await rawRequest(s.proxyUrl, 'CONNECT ti.example:443 HTTP/1.1\r\nHost: ti.example:443\r\n\r\n')), 405)
  t.match(s.accessLines(), [{ method: 'CONNECT', statusCode: 405, error: 'METHOD_NOT_ALLOWED' }])
})

t.test('a caller that closed mid-head is not answered, nor counted as an exchange', async (t) => {
  const s = await sidecar(t)
  const peer = await recordingPeer(t, Number(new URL(s.proxyUrl).port), 'GET /v2/store/x HTTP/1.1\r\nHost: a\r\n')
  peer.socket.end()
  await eventually(t, 'the connection closed', () => peer.closed())
  t.equal(peer.got(), '', 'no answer written to its half-closed connection')
  const m = await scrapeSettled(s.adminUrl)
  t.equal(m.get(exchanges('OTHER', '4xx')), undefined)
  t.same(s.accessLines(), [])
})

t.test('a head past MAX_HEADER_COUNT fields is refused as it arrives, not once it ends', async (t) => {
  const s = await sidecar(t, { MAX_HEADER_COUNT: '16' })
  let head = 'GET /v2/store/x HTTP/1.1\r\nHost: a\r\n'
  for (let i = 0; i < 20; i++) head += `X-Field-${i}: ${i}\r\n`
  // No blank line: the head never ends, and Node's parser holds no more of it than the cap.
  const peer = await recordingPeer(t, Number(new URL(s.proxyUrl).port), head)
  await eventually(t, 'an answer', () => peer.got() !== '', 5000)
  t.equal(statusOf(peer.got()), 431)
})

t.test('Fastify\'s own per-request lines are off: one access line per exchange', async (t) => {
  const s = await sidecar(t)
  const res = await request(s.proxyUrl + '/v2/store/x')
  await res.body.dump()
  await scrapeSettled(s.adminUrl)
  t.equal(s.accessLines().length, 1)
  t.same(s.logs.entries().filter((e) => e.msg === 'incoming request' || e.msg === 'request completed'), [])
})
