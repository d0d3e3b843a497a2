import { createConnection, type Socket } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", B.3: a caller that is gone is never served later.

/** Sends a raw request without reading an answer; the caller gives up by destroying the socket. */
function callerThatGivesUp (proxyUrl: string, id: string): Socket {
  const { port } = new URL(proxyUrl)
  const socket = createConnection(Number(port), '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`POST /v2/store/orders HTTP/1.1\r\nhost: x\r\nx-id: ${id}\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}`)
  return socket
}

t.test('a caller that gives up while its request is queued: the request is never sent (no duplicate order)', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  // Fill every upstream connection.
  const busy = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) =>
    await request(proxyUrl + '/busy', { headers: { 'x-id': `busy-${i}` } }).then(async (r) => await r.body.text()))
  await eventually(t, `all ${UPSTREAM_CONNECTIONS} connections hold a request`, () => upstream.received.length === UPSTREAM_CONNECTIONS)
  const gone = callerThatGivesUp(proxyUrl, 'gone')
  await eventually(t, 'the caller\'s request is queued', async () => await metricValue(adminUrl, 'store_auth_proxy_upstream_queued_requests') === 1)
  gone.destroy()
  await eventually(t, 'the gone caller counted as aborted', async () =>
    await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'POST', status_class: 'none', outcome: 'aborted' }) === 1)
  upstream.release()
  await Promise.all(busy)
  // Connections came free: anything still queued is sent before a request that comes after it.
  const after = request(proxyUrl + '/after', { headers: { 'x-id': 'after' } }).then(async (r) => await r.body.text())
  await eventually(t, 'the later request reached the upstream', () => upstream.ids().includes('after'))
  upstream.release()
  await after
  t.notOk(upstream.ids().includes('gone'), 'the gone caller\'s order never reached the upstream')
})
