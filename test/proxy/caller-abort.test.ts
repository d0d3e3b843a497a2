import { createConnection } from 'node:net'
import t from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", D.8 and D.11: callers that go away are counted as what
// they got, and are ordinary client behaviour in the logs.

function rawCaller (proxyUrl: string, bytes: string | Buffer): ReturnType<typeof createConnection> {
  const socket = createConnection(Number(new URL(proxyUrl).port), '127.0.0.1')
  socket.on('error', () => {})
  socket.write(bytes)
  return socket
}

t.test('a caller that gives up before any answer: counted with no status class and outcome aborted, never as 2xx', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startUpstream(t, (_req, res) => { setTimeout(() => { res.end('late') }, 300) })
  const { proxyUrl, adminUrl, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, ACCESS_LOG: 'true' })
  const socket = rawCaller(proxyUrl, 'GET /slow HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the request reached the upstream', () => upstream.received.length === 1)
  socket.destroy()
  const aborted = { method: 'GET', status_class: 'none', outcome: 'aborted' }
  await eventually(t, 'the request counted as aborted', async () => await metricValue(adminUrl, 'store_auth_proxy_requests_total', aborted) === 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'GET', status_class: '2xx', outcome: 'completed' }), 0)
  const line = logs.entries().find((e) => e.msg === 'request')
  t.equal(line?.statusCode, null, 'the access log says no status was sent')
  t.equal(line?.outcome, 'aborted')
})

t.test('an answer cut off mid-body: counted as truncated with the status sent, never completed', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startUpstream(t, (_req, res) => {
    res.writeHead(200, { 'content-length': 100_000 })
    res.write(Buffer.alloc(10_000))
    setTimeout(() => { res.socket?.destroy() }, 50)
  })
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  rawCaller(proxyUrl, 'GET /cut HTTP/1.1\r\nHost: x\r\n\r\n')
  const truncated = { method: 'GET', status_class: '2xx', outcome: 'truncated' }
  await eventually(t, 'the request counted as truncated', async () => await metricValue(adminUrl, 'store_auth_proxy_requests_total', truncated) === 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'GET', status_class: '2xx', outcome: 'completed' }), 0)
})

for (const size of [1000, 1_000_000]) {
  t.test(`a caller that aborts mid-upload (${size} bytes announced): no ERROR, no stack, nothing sent for it`, async (t) => {
    const standIn = await startStandIn(t)
    const upstream = await startUpstream(t)
    const { proxyUrl, adminUrl, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
    const socket = rawCaller(proxyUrl, `POST /v2/store/orders HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n{"lineItems":`)
    // The sidecar has the request (and, for a body that streams, may have begun sending it).
    await eventually(t, 'the sidecar has the request in flight', async () => await metricValue(adminUrl, 'store_auth_proxy_requests_in_flight') === 1)
    socket.resetAndDestroy()
    await eventually(t, 'the request counted as aborted', async () =>
      await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'POST', status_class: 'none', outcome: 'aborted' }) === 1)
    // Whatever reached the upstream for it is over, so its body is all there will be.
    await eventually(t, 'the upstream has no request open', () => upstream.open() === 0)
    const entries = logs.entries()
    t.same(entries.filter((e) => (e.level as number) >= 50), [], 'no ERROR line')
    t.notOk(logs.text().includes('"stack"'), 'no stack trace')
    t.equal(upstream.received.filter((r) => r.body.length === size).length, 0, 'no complete body sent upstream')
  })
}
