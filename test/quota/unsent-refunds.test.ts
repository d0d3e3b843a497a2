// A budget point taken for a request that never left the sidecar is given back at once: the
// caller left while the request waited for an upstream connection, or the wait ran out (503
// UPSTREAM_BUSY). Once the request was written, the point stays spent, whoever left.
// (refunds.test.ts: a connection refused, and one that died after the request was written.)
import t, { type Test } from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

const CATALOG = '/v2/store/products/catalog'

/** Every upstream connection holding an unlimited request, so that the next request queues. */
async function saturated (t: Test, env: Record<string, string> = {}) {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const s = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, RATE_LIMITS: `GET ${CATALOG} 1/4h`, RATE_LIMIT_MAX_WAIT_MS: '0', UPSTREAM_TIMEOUT_MS: '60000', ...env
  })
  const holding = Array.from({ length: UPSTREAM_CONNECTIONS }, async () => { await (await request(s.proxyUrl + '/v2/store/orders')).body.dump() })
  await eventually(t, 'every connection holds a request', () => upstream.received.length === UPSTREAM_CONNECTIONS)
  const queued = async (): Promise<number> => await metricValue(s.adminUrl, 'store_auth_proxy_upstream_queued_requests')
  const catalogCalls = (): number => upstream.received.filter((r) => r.url === CATALOG).length
  const call = async (signal?: AbortSignal): Promise<number> => {
    const res = await request(s.proxyUrl + CATALOG, { ...(signal === undefined ? {} : { signal }) })
    await res.body.dump()
    return res.statusCode
  }
  return { ...s, upstream, holding, queued, catalogCalls, call }
}

t.test('a caller that leaves while its request waits for a connection gets its point back before a connection frees', async (t) => {
  const s = await saturated(t)
  const left = new AbortController()
  const first = s.call(left.signal).catch((err: Error) => err.name)
  await eventually(t, 'the catalog call waits for a connection', async () => await s.queued() === 1)
  left.abort()
  t.equal(await first, 'AbortError')
  // No connection has freed: the point must be back already, so this call is admitted and
  // waits for a connection instead of being refused for the budget (RATE_LIMIT_MAX_WAIT_MS=0).
  const second = s.call()
  await eventually(t, 'the second catalog call waits for a connection too', async () => await s.queued() >= 1 && s.catalogCalls() === 0)
  s.upstream.releaseAll()
  t.equal(await second, 200, 'admitted: the left caller spent nothing')
  await Promise.all(s.holding)
  t.equal(s.catalogCalls(), 1, 'TI received the catalog once: the left caller\'s request was dropped unsent')
  t.equal(await s.call(), 429, 'and that one is spent')
})

t.test('a request whose wait for a connection runs out (503 UPSTREAM_BUSY) gets its point back at once', async (t) => {
  const s = await saturated(t, { UPSTREAM_QUEUE_TIMEOUT_MS: '200' })
  t.equal(await s.call(), 503)
  t.equal(await s.call(), 503, 'admitted again and busy again, not refused for the budget: nothing was spent')
  s.upstream.releaseAll()
  await Promise.all(s.holding)
  t.equal(await s.call(), 200)
  t.equal(s.catalogCalls(), 1, 'neither busy request was sent late')
  t.equal(await s.call(), 429)
})

t.test('a caller that leaves after its request was written spends the point: TI counted it', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startStalledUpstream(t)
  const s = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, RATE_LIMITS: `GET ${CATALOG} 1/4h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const left = new AbortController()
  const first = request(s.proxyUrl + CATALOG, { signal: left.signal }).catch((err: Error) => err.name)
  await eventually(t, 'TI received the catalog call', () => upstream.received.length === 1)
  left.abort()
  t.equal(await first, 'AbortError')
  await eventually(t, 'the sidecar saw the caller leave', async () => await metricValue(s.adminUrl, 'store_auth_proxy_requests_in_flight') === 0)
  upstream.releaseAll()
  const res = await request(s.proxyUrl + CATALOG)
  await res.body.dump()
  t.equal(res.statusCode, 429)
  t.equal(upstream.received.length, 1)
})
