import { request as httpRequest } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'

// Issue "Forward faithfully", B.5, D.9 and D.10: what the upstream sends that is not a
// plain, complete answer.

t.test('103 Early Hints every 0.3 s and never a final answer: 504 UPSTREAM_TIMEOUT after UPSTREAM_TIMEOUT_MS', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    const hint = setInterval(() => { socket.write('HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n') }, 300)
    socket.on('close', () => { clearInterval(hint) })
  })
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_TIMEOUT_MS: '1000' })
  const started = performance.now()
  const res = await request(proxyUrl + '/slow')
  t.equal(res.statusCode, 504)
  t.same(await res.body.json(), { error: 'UPSTREAM_TIMEOUT', message: 'the upstream did not answer in time' })
  t.ok(performance.now() - started < 5000, 'bounded by UPSTREAM_TIMEOUT_MS, not by the hints')
})

t.test('103 Early Hints then a final answer: the final answer is forwarded', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n')
    setTimeout(() => { socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok') }, 50)
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/hints')
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'ok')
})

const invalid: Record<string, string> = {
  'a control byte in a header value': 'HTTP/1.1 200 OK\r\nx-a: a\x01b\r\ncontent-length: 2\r\n\r\nok',
  'bare LF line endings': 'HTTP/1.1 200 OK\ncontent-length: 2\n\nok',
  'an HTTP/0.9-style answer': 'hello, no status line',
  'headers over 16 KiB': 'HTTP/1.1 200 OK\r\nx-big: ' + 'a'.repeat(17 * 1024) + '\r\ncontent-length: 2\r\n\r\nok',
  'an unsolicited 101': 'HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: foo\r\n\r\n',
  'status 099': 'HTTP/1.1 099 Odd\r\ncontent-length: 2\r\n\r\nok',
  // undici's HTTP/1.1 client refuses a 100 it did not ask for (it never sends Expect:
  // 100-continue); RFC 9110 §15.2 says a client should accept it. See README, Error answers.
  'an unexpected 100 Continue': 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok'
}

for (const [name, bytes] of Object.entries(invalid)) {
  t.test(`invalid HTTP from the upstream (${name}): 502 UPSTREAM_BAD_RESPONSE, counted`, async (t) => {
    const upstream = await startRawUpstream(t, (socket) => { socket.end(bytes) })
    const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url)
    const res = await request(proxyUrl + '/bad')
    t.equal(res.statusCode, 502)
    t.same(await res.body.json(), { error: 'UPSTREAM_BAD_RESPONSE', message: 'the upstream sent an invalid response' })
    t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'UPSTREAM_BAD_RESPONSE' }), 1)
  })
}

t.test('a reset mid-body of a close-delimited answer: the caller sees an incomplete answer, never a complete one', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n' + 'x'.repeat(5000))
    setTimeout(() => { socket.resetAndDestroy() }, 100)
  })
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url)
  const seen = await new Promise<{ status: number, complete: boolean, bytes: number }>((resolve) => {
    const req = httpRequest(proxyUrl + '/stream', (res) => {
      let bytes = 0
      res.on('data', (c: Buffer) => { bytes += c.length })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, complete: res.complete, bytes }) })
      res.on('error', () => { resolve({ status: res.statusCode ?? 0, complete: false, bytes }) })
    })
    req.on('error', () => { resolve({ status: 0, complete: false, bytes: 0 }) })
    req.end()
  })
  t.equal(seen.status, 200)
  t.equal(seen.complete, false, 'not passed off as complete')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'GET', status_class: '2xx', outcome: 'truncated' }), 1)
})

t.test('a close-delimited answer that ends with a clean close is complete', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n' + 'y'.repeat(5000))
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/stream')
  t.equal(res.statusCode, 200)
  t.equal((await res.body.text()).length, 5000)
})
