// The catalog rule `GET /v2/store/products/catalog 1/4h 6/1d` across three
// sidecars on one Redis: the first call goes upstream, every other one is answered locally
// with an exact Retry-After (the seconds to the 4-hour window's end), whichever sidecar it
// goes through and however its path is spelled; requests outside the rule are untouched.
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import { callVia, dishonesty, eventually, fleetDeltas, header, scrapeFleet, startFleet, statusOf, type Seen } from './fleet.js'

const RULE = 'GET /v2/store/products/catalog'
const WINDOW_S = 4 * 3600

t.setTimeout(90_000)

t.test('the catalog rule: one call per 4 h for the fleet, the rest answered locally with an exact Retry-After', async (t) => {
  const redis = await startRedis(t)
  const { upstream, sidecars } = await startFleet(t, 3, {
    RATE_LIMITS: `${RULE} 1/4h 6/1d`, RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '2000', RATE_LIMIT_FLEET_SIZE: '3', ACCESS_LOG: 'false'
  })
  const [a, b, c] = sidecars
  if (a === undefined || b === undefined || c === undefined) throw new Error('three sidecars')
  for (const s of sidecars) {
    const status = await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'redis')
    t.same(status?.rules, [{ rule: RULE, limits: ['1/4h', '6/1d'], share: [0, 2] }], `sidecar ${s.name}: /status lists the rule, its limits and a third of each for a sidecar cut off from Redis`)
    t.match(status?.redis, { url: `redis://127.0.0.1:${redis.port}`, up: true, problem: null, maxmemoryPolicy: 'noeviction', evicting: false }, `sidecar ${s.name}: /status shows Redis as scheme://host:port, up`)
  }
  const before = await scrapeFleet(sidecars)

  const first = await callVia(b, '/v2/store/products/catalog?page=1')
  t.equal(first.status, 200, 'the first call, through B, goes upstream')
  const rest: Seen[] = []
  for (const [sidecar, path] of [[a, '/v2/store/products/catalog'], [c, '/v2/store/products/catalog?page=2'], [b, '/v2/store/products/catalog'],
    [a, '/v2/store/products/%63atalog'], [c, '/v2/store/products/cat%61log?x=%2F']] as const) {
    rest.push(await callVia(sidecar, path))
  }
  t.equal(upstream.arrivals.filter((x) => x.url.startsWith('/v2/store/products/')).length, 1, 'the upstream saw the catalog once')
  for (const s of rest) {
    t.equal(dishonesty(s, { rule: RULE, reason: 'budget', maxRetryAfterS: WINDOW_S }), undefined, `through ${s.via}: a local 429 naming the rule and the budget`)
    const elapsedS = (s.doneAt - first.sentAt) / 1000
    const retryAfter = Number(header(s, 'retry-after'))
    t.ok(retryAfter <= WINDOW_S && retryAfter >= WINDOW_S - elapsedS - 1,
      `through ${s.via}: Retry-After ${retryAfter} is the 4 h window's end, within a second (${elapsedS.toFixed(1)} s after the first call)`)
  }

  // Outside the rule: another method, another path.
  const others = [await callVia(a, '/v2/store/products/catalog', { method: 'POST' }), await callVia(c, '/v2/store/products/catalogue'), await callVia(b, '/v2/store/orders')]
  t.same(others.map((s) => s.status), [200, 200, 200], 'POST to the catalog, /catalogue and /orders are not the rule: they go upstream')

  const after = await scrapeFleet(sidecars)
  t.same(fleetDeltas(before, after, 'store_auth_proxy_rate_limited_total'), { [`{action="refused",reason="budget",rule="${RULE}"}`]: rest.length },
    'rate_limited_total{rule,reason="budget",action="refused"} summed over the fleet')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_errors_total'), { '{code="UPSTREAM_RATE_LIMITED"}': rest.length })
  t.same(fleetDeltas(before, after, 'store_auth_proxy_requests_total'), {
    '{method="GET",outcome="completed",status_class="2xx"}': 3,
    '{method="GET",outcome="completed",status_class="4xx"}': rest.length,
    '{method="POST",outcome="completed",status_class="2xx"}': 1
  }, 'requests_total summed over the fleet')
})
