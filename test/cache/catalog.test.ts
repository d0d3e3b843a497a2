// The catalog scenario on one sidecar: TI's catalog allows 1 call per 4 hours; the read cache
// turns that into one call per 4 hours for every caller, with honest Age and Cache-Status.
import t from 'tap'
import { seriesKey } from '../helpers/metrics-scrape.js'
import { CATALOG, HOUR, cacheSidecar, catalogBody, startTi } from './fixture.js'

const RULE = `GET ${CATALOG} 1/4h 6/1d cache=1h stale=1d`
const result = (r: string): string => seriesKey('store_auth_proxy_cache_requests_total', { rule: `GET ${CATALOG}`, result: r })

t.test('one call to TI serves every caller; stale after cache=, while the budget refuses; refreshed when it allows', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: RULE, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const first = await s.get(CATALOG)
  t.equal(first.status, 200)
  t.equal(first.body, catalogBody())
  t.equal(first.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600')
  t.equal(first.headers.age, '0')

  await s.advance(10 * 60_000)
  for (let i = 0; i < 5; i++) {
    const again = await s.get(CATALOG)
    t.equal(again.status, 200)
    t.equal(again.body, first.body, 'the same bytes TI gave')
    t.equal(again.headers.age, '600')
    t.equal(again.headers['cache-status'], 'store-auth-proxy; hit; ttl=3000')
    t.equal(again.headers['content-type'], 'application/json')
  }
  t.equal(ti.received.length, 1, 'TI saw one catalog call')

  // Past cache= (1 h), within the 4 h window: the budget refuses a refetch, the stale answer stands in.
  await s.advance(HOUR)
  const stale = await s.get(CATALOG)
  t.equal(stale.status, 200)
  t.equal(stale.body, first.body)
  t.equal(stale.headers['cache-status'], 'store-auth-proxy; hit; ttl=-600; detail=stale-budget')
  t.equal(stale.headers.age, '4200')
  t.equal(ti.received.length, 1)

  // The window over: the refetch goes to TI (and is stored again).
  await s.advance(3 * HOUR)
  ti.answer(() => ({ status: 200, headers: { 'content-type': 'application/json' }, body: '["new"]' }))
  const refreshed = await s.get(CATALOG)
  t.equal(refreshed.body, '["new"]')
  t.equal(refreshed.headers['cache-status'], 'store-auth-proxy; fwd=stale; fwd-status=200; stored; ttl=3600')
  t.equal(ti.received.length, 2)
  t.equal((await s.get(CATALOG)).body, '["new"]')

  const m = await s.metrics()
  t.equal(m.get(result('hit')), 6)
  t.equal(m.get(result('stale')), 1)
  t.equal(m.get(result('miss')), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_cache_stores_total', { rule: `GET ${CATALOG}` })), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limited_total', { rule: `GET ${CATALOG}`, reason: 'budget', action: 'refused' })), 1)
})
