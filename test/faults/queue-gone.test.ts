import { createConnection } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { build, startStandIn } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", B.3: a caller that is gone is never served later.

/** Sends a raw request and closes the connection after `closeAfterMs`, without reading an answer. */
function callerThatGivesUp (proxyUrl: string, id: string, closeAfterMs: number): void {
  const { port } = new URL(proxyUrl)
  const socket = createConnection(Number(port), '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`POST /v2/store/orders HTTP/1.1\r\nhost: x\r\nx-id: ${id}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}`)
  setTimeout(() => { socket.destroy() }, closeAfterMs)
}

t.test('a caller that gives up while its request is queued: the request is never sent (no duplicate order)', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  // Fill every upstream connection.
  const busy = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) =>
    await request(proxyUrl + '/busy', { headers: { 'x-id': `busy-${i}` } }).then(async (r) => await r.body.text()))
  while (upstream.received.length < UPSTREAM_CONNECTIONS) await new Promise((resolve) => setTimeout(resolve, 20))
  callerThatGivesUp(proxyUrl, 'gone', 200)
  while (await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'POST', status_class: 'none', outcome: 'aborted' }) < 1) {
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  upstream.release()
  await Promise.all(busy)
  // Connections came free: anything still queued would have been sent by now.
  const after = await request(proxyUrl + '/after', { headers: { 'x-id': 'after' } })
  const waiting = after.body.text()
  while (!upstream.ids().includes('after')) await new Promise((resolve) => setTimeout(resolve, 20))
  upstream.release()
  await waiting
  t.notOk(upstream.ids().includes('gone'), 'the gone caller\'s order never reached the upstream')
})
