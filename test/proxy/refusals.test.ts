import t, { type Test } from 'tap'
import { startSidecar } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", D.12: every refusal in the sidecar's own JSON shape,
// counted in the metrics and written to the access log; nothing forwarded.

async function sidecar (t: Test) {
  const upstream = await startUpstream(t)
  return { ...await startSidecar(t, upstream.url, { ACCESS_LOG: 'true' }), upstream }
}

const head = (lines: string[]): string => lines.join('\r\n') + '\r\n\r\n'
const bodyOf = (answer: string): unknown => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))

t.test('malformed percent-encoding (/%zz): 400 BAD_REQUEST in the sidecar\'s shape, URL not echoed, counted and logged', async (t) => {
  const { proxyUrl, adminUrl, upstream, logs } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['GET /v2/store/%zz<script> HTTP/1.1', 'Host: localhost', 'Connection: close']))
  t.equal(statusOf(answer), 400)
  t.same(bodyOf(answer), { error: 'BAD_REQUEST', message: 'the request path has invalid percent-encoding' })
  t.notMatch(answer, /%zz|script/, 'the URL is not echoed')
  t.equal(upstream.received.length, 0)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'BAD_REQUEST' }), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'GET', status_class: '4xx', outcome: 'completed' }), 1)
  t.ok(logs.entries().some((e) => e.msg === 'request' && e.statusCode === 400), 'an access line')
})

t.test('CONNECT: 405 METHOD_NOT_ALLOWED as documented, not a silent close; nothing forwarded', async (t) => {
  const { proxyUrl, adminUrl, upstream } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['CONNECT example.com:443 HTTP/1.1', 'Host: example.com:443']))
  t.equal(statusOf(answer), 405)
  t.same(bodyOf(answer), { error: 'METHOD_NOT_ALLOWED', message: 'the CONNECT method is not forwarded' })
  t.equal(upstream.received.length, 0)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'METHOD_NOT_ALLOWED' }), 1)
})

t.test('a method outside the forwarded set: the 405 names the method sent, not a metrics label', async (t) => {
  const { proxyUrl, upstream } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['PROPFIND /x HTTP/1.1', 'Host: localhost', 'Connection: close']))
  t.equal(statusOf(answer), 405)
  t.same(bodyOf(answer), { error: 'METHOD_NOT_ALLOWED', message: 'the PROPFIND method is not forwarded' })
  t.equal(upstream.received.length, 0)
})

t.test('a duplicate Host header: 400 (RFC 9112 §3.2), nothing forwarded', async (t) => {
  const { proxyUrl, upstream } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['GET /x HTTP/1.1', 'Host: localhost', 'Host: evil.example', 'Connection: close']))
  t.equal(statusOf(answer), 400)
  t.same(bodyOf(answer), { error: 'BAD_REQUEST', message: 'the request has more than one Host header' })
  t.equal(upstream.received.length, 0)
})

t.test('what Node\'s parser refuses (a head over MAX_HEADER_BYTES): the sidecar\'s JSON shape, counted under its method, logged', async (t) => {
  const { proxyUrl, adminUrl, upstream, logs } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['PATCH /x HTTP/1.1', 'Host: localhost', `X-Big: ${'a'.repeat(20_000)}`, 'Connection: close']))
  t.equal(statusOf(answer), 431)
  t.same(bodyOf(answer), { error: 'HEADERS_TOO_LARGE', message: 'the request head exceeds 16384 bytes' })
  t.equal(upstream.received.length, 0)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'HEADERS_TOO_LARGE' }), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'PATCH', status_class: '4xx', outcome: 'completed' }), 1)
  t.ok(logs.entries().some((e) => e.msg === 'request' && e.statusCode === 431), 'an access line')
})

t.test('bytes that are not HTTP: 400 BAD_REQUEST in the sidecar\'s shape, counted', async (t) => {
  const { proxyUrl, adminUrl } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, 'GET /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n')
  t.equal(statusOf(answer), 400)
  t.same(bodyOf(answer), { error: 'BAD_REQUEST', message: 'the request is not valid HTTP' })
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'BAD_REQUEST' }), 1)
})

t.test('a head that parses but a body that is not valid HTTP (Transfer-Encoding: xchunked): one 400 in the sidecar\'s shape, counted once', async (t) => {
  const { proxyUrl, adminUrl, upstream } = await sidecar(t)
  const answer = await rawRequest(proxyUrl, head(['POST /x HTTP/1.1', 'Host: localhost', 'Transfer-Encoding: xchunked']) + '3\r\nabc\r\n0\r\n\r\n')
  t.equal(statusOf(answer), 400)
  t.same(bodyOf(answer), { error: 'BAD_REQUEST', message: 'the request is not valid HTTP' })
  t.equal(upstream.received.length, 0)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'BAD_REQUEST' }), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'POST', status_class: '4xx', outcome: 'completed' }), 1)
})
