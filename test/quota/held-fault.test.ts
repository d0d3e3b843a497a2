// The held-back 500 (Apigee's rate-limit
// fault detection) must neither swallow, alter nor duplicate an answer, nor hang a caller.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { request } from 'undici'
import { build, startStandIn } from '../helpers/build.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'
import { SPIKE_ARREST_BODY } from './sidecar.js'

t.test('a rate-limit 500 split across slow chunks is found, and passed on byte for byte once', async (t) => {
  const body = Buffer.from(SPIKE_ARREST_BODY)
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n')
    const parts = [body.subarray(0, 20), body.subarray(20, 95), body.subarray(95)]
    void (async () => {
      for (const p of parts) {
        socket.write(`${p.length.toString(16)}\r\n`)
        socket.write(Buffer.concat([p, Buffer.from('\r\n')]))
        await sleep(30)
      }
      socket.end('0\r\n\r\n')
    })()
  })
  const standIn = await startStandIn(t)
  const s = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  const res = await request(s.proxyUrl + '/v2/store/x')
  t.equal(res.statusCode, 500)
  t.equal(await res.body.text(), SPIKE_ARREST_BODY)
  const next = await request(s.proxyUrl + '/v2/store/x')
  await next.body.text()
  t.equal(next.statusCode, 429, 'cool-down started')
  t.equal(upstream.connections(), 1, 'TI saw one call')
})

t.test('a 500 over 64 KiB is delivered byte for byte (not held forever, not cut)', async (t) => {
  const big = Buffer.alloc(200 * 1024)
  for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write(`HTTP/1.1 500 Internal Server Error\r\nContent-Length: ${big.length}\r\n\r\n`)
    void (async () => {
      for (let at = 0; at < big.length; at += 16 * 1024) {
        socket.write(big.subarray(at, at + 16 * 1024))
        await sleep(5)
      }
    })()
  })
  const standIn = await startStandIn(t)
  const s = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  const res = await request(s.proxyUrl + '/v2/store/x')
  t.equal(res.statusCode, 500)
  t.ok(Buffer.from(await res.body.arrayBuffer()).equals(big), 'same bytes')
})

t.test('a 500 cut while held back still answers its caller (no hang)', async (t) => {
  const upstream = await startRawUpstream(t, (socket) => {
    socket.write('HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1000\r\n\r\n{"fault":')
    setTimeout(() => { socket.destroy() }, 50)
  })
  const standIn = await startStandIn(t)
  const s = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  const outcome = await request(s.proxyUrl + '/v2/store/x', { headersTimeout: 15_000, bodyTimeout: 15_000 })
    .then(async (res) => { await res.body.text(); return `status ${res.statusCode}` }, (err: Error) => `error ${err.message}`)
    .catch((err: Error) => `body error ${err.message}`)
  t.comment(outcome)
  t.notMatch(outcome, /timeout/i, 'answered or closed, not left hanging')
})
