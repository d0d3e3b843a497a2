import { request as httpRequest } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'

// UPSTREAM_TIMEOUT_MS bounds the wait for the final answer counted from the request's
// start, whatever interim answers (103 Early Hints) come meanwhile; once the final answer
// has begun, only each pause within its body is bounded, not the body's whole length.

const EARLY_HINTS = 'HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\n'

t.test('an interim answer does not restart the wait: 504 UPSTREAM_TIMEOUT_MS after the request, not after the 103', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    setTimeout(() => { socket.write(EARLY_HINTS) }, 1200)
  })
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_TIMEOUT_MS: '2000' })
  const started = performance.now()
  const res = await request(proxyUrl + '/hinted')
  const elapsed = performance.now() - started
  t.equal(res.statusCode, 504)
  t.match(await res.body.json(), { error: 'UPSTREAM_TIMEOUT' })
  t.ok(elapsed >= 1900 && elapsed < 3000, `answered ${Math.round(elapsed)} ms after the request (2000 expected, 3200 if timed from the 103)`)
})

t.test('after a 103, a final answer whose body takes longer than UPSTREAM_TIMEOUT_MS in all, with short pauses, arrives whole', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(EARLY_HINTS)
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 6\r\n\r\n')
    let sent = 0
    const timer = setInterval(() => {
      socket.write('b')
      if (++sent === 6) clearInterval(timer)
    }, 300)
    socket.once('close', () => { clearInterval(timer) })
  })
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_TIMEOUT_MS: '1000' })
  const got = await new Promise<{ status: number, complete: boolean, body: string }>((resolve) => {
    const req = httpRequest(proxyUrl + '/slow-body', (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, complete: res.complete, body }) })
      res.on('error', () => { resolve({ status: res.statusCode ?? 0, complete: false, body }) })
    })
    req.on('error', () => { resolve({ status: 0, complete: false, body: '' }) })
    req.end()
  })
  t.same(got, { status: 200, complete: true, body: 'bbbbbb' })
})
