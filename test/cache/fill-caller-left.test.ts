// A fill too large to store streams to its caller once it outgrows CACHE_ENTRY_MAX_BYTES. Its waiters were told as the
// head went out (they fetch by themselves) and its miss was counted then: a caller that leaves
// mid-answer ends that exchange, and nothing about it is told or counted twice.
import t from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { cacheSidecar, catalogBody, inFlight, startTi } from './fixture.js'

const RULE = 'GET /v2/store/**'
const counted = (result: string): string => seriesKey('store_auth_proxy_cache_requests_total', { rule: RULE, result })

t.test('a streamed fill whose caller leaves mid-answer counts one miss; the next caller fetches again', async (t) => {
  const ti = await startTi(t)
  const body = catalogBody(5_000)
  ti.answer(() => ({ status: 200, headers: { 'content-type': 'application/json' }, body, stallAfter: 3_000 }))
  const s = await cacheSidecar(t, ti, {
    RATE_LIMITS: `${RULE} 100/1h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0', CACHE_ENTRY_MAX_BYTES: '2048'
  })
  const res = await request(s.proxyUrl + '/v2/store/big')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=too-large')
  res.body.destroy()
  await inFlight(t, s, 0)
  // The sidecar saw the caller leave (its exchange counted as it closed).
  await eventually(t, 'the aborted answer is counted', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_total', { method: 'GET', outcome: 'aborted', status_class: '2xx' })) ?? 0) === 1)
  ti.answer(() => ({ status: 200, headers: { 'content-type': 'application/json' }, body: 'small' }))
  const again = await s.get('/v2/store/big')
  t.equal(again.body, 'small', 'nothing of the first answer was stored')
  const m = await s.metrics()
  t.equal(m.get(counted('miss')), 2, 'one miss for each fetch, the one whose caller left included')
  t.equal(ti.received.length, 2)
})
