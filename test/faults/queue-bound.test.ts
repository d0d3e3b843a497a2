import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", B.4: the wait for an upstream connection is bounded.

t.test('more callers than connections to a stalled upstream: each gets a status line, the queued ones 503 UPSTREAM_BUSY, none sent late', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, UPSTREAM_TIMEOUT_MS: '2000', UPSTREAM_QUEUE_TIMEOUT_MS: '300', IDLE_TIMEOUT_MS: '6000'
  })
  const callers = 200
  const ask = async (i: number) => {
    const res = await request(proxyUrl + '/v2/store/orders', { method: 'POST', body: '{}', headers: { 'x-id': String(i), 'content-type': 'application/json' } })
    return { status: res.statusCode, retryAfter: res.headers['retry-after'], body: await res.body.json() as { error: string } }
  }
  // The queued callers come once every connection holds a request, not merely after it in
  // time: on a loaded machine a caller that reached the sidecar only after a 504 had freed
  // a connection would rightly be sent.
  const onConnections = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => await ask(i))
  await eventually(t, `all ${UPSTREAM_CONNECTIONS} connections hold a request`, () => upstream.received.length === UPSTREAM_CONNECTIONS)
  const queued = Array.from({ length: callers - UPSTREAM_CONNECTIONS }, async (_, i) => await ask(UPSTREAM_CONNECTIONS + i))
  const answers = await Promise.all([...onConnections, ...queued])
  const byStatus = new Map<number, number>()
  for (const a of answers) byStatus.set(a.status, (byStatus.get(a.status) ?? 0) + 1)
  t.equal(byStatus.get(504), UPSTREAM_CONNECTIONS, 'the ones on a connection time out')
  t.equal(byStatus.get(503), callers - UPSTREAM_CONNECTIONS, 'the queued ones are told the upstream is busy')
  const busy = answers.find((a) => a.status === 503)
  t.equal(busy?.body.error, 'UPSTREAM_BUSY')
  t.equal(busy?.retryAfter, '1')
  t.equal(upstream.received.length, UPSTREAM_CONNECTIONS, 'nothing sent for a caller already answered')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'UPSTREAM_BUSY' }), callers - UPSTREAM_CONNECTIONS)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_upstream_queued_requests'), 0)
  upstream.release()
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
