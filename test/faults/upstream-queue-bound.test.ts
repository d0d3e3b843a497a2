import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", B.4: the wait for an upstream connection is bounded.
// The connections stay held until every queued caller is answered, so no queued caller can
// find a connection freed: on a busy machine the callers may reach the sidecar seconds apart,
// and one that arrived after a connection was freed would rightly be sent. (An upstream
// timeout's 504 is test/faults/upstream-protocol.test.ts's.)
t.test('more callers than connections to a stalled upstream: each gets a status line, the queued ones 503 UPSTREAM_BUSY, none sent late', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, UPSTREAM_TIMEOUT_MS: '600000', UPSTREAM_QUEUE_TIMEOUT_MS: '300', IDLE_TIMEOUT_MS: '660000'
  })
  const callers = 200
  const ask = async (i: number) => {
    const res = await request(proxyUrl + '/v2/store/orders', { method: 'POST', body: '{}', headers: { 'x-id': String(i), 'content-type': 'application/json' } })
    return { status: res.statusCode, retryAfter: res.headers['retry-after'], body: await res.body.text() }
  }
  const onConnections = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => await ask(i))
  await eventually(t, `all ${UPSTREAM_CONNECTIONS} connections hold a request`, () => upstream.received.length === UPSTREAM_CONNECTIONS)
  const queued = await Promise.all(Array.from({ length: callers - UPSTREAM_CONNECTIONS }, async (_, i) => await ask(UPSTREAM_CONNECTIONS + i)))
  t.same(new Set(queued.map((a) => a.status)), new Set([503]), 'the queued ones are told the upstream is busy')
  t.equal((JSON.parse(queued[0]?.body ?? '{}') as { error?: string }).error, 'UPSTREAM_BUSY')
  t.equal(queued[0]?.retryAfter, '1')
  t.equal(upstream.received.length, UPSTREAM_CONNECTIONS, 'nothing sent for a caller already answered')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'UPSTREAM_BUSY' }), callers - UPSTREAM_CONNECTIONS)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_upstream_queued_requests'), 0)
  upstream.release()
  const served = await Promise.all(onConnections)
  t.same(new Set(served.map((a) => `${a.status} ${a.body}`)), new Set(['200 done']), 'the ones on a connection get the upstream\'s answer')
  t.equal(upstream.received.length, UPSTREAM_CONNECTIONS, 'and nothing else was sent')
})

t.test('UPSTREAM_QUEUE_LIMIT: past it, callers get 503 UPSTREAM_BUSY at once', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, UPSTREAM_QUEUE_LIMIT: '10', UPSTREAM_QUEUE_TIMEOUT_MS: '20000' })
  const inFlight = Array.from({ length: UPSTREAM_CONNECTIONS + 10 }, async () => await request(proxyUrl + '/x').then(async (r) => { await r.body.dump(); return r.statusCode }))
  await eventually(t, `all ${UPSTREAM_CONNECTIONS} connections hold a request`, () => upstream.received.length === UPSTREAM_CONNECTIONS)
  await eventually(t, '10 requests queued', async () => await metricValue(adminUrl, 'store_auth_proxy_upstream_queued_requests') === 10)
  const started = performance.now()
  const over = await request(proxyUrl + '/x')
  t.equal(over.statusCode, 503)
  t.equal((await over.body.json() as { error: string }).error, 'UPSTREAM_BUSY')
  t.ok(performance.now() - started < 1000, 'at once')
  upstream.releaseAll()
  const statuses = await Promise.all(inFlight)
  t.same(new Set(statuses), new Set([200]), 'those within the limit are served once connections free up')
})
