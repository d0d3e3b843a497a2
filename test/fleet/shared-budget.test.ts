// Three sidecar processes sharing one Redis and one credential never
// exceed one budget together under concurrent load; every caller gets an honest answer;
// the three sidecars' metrics add up to what the callers saw.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import {
  chainWindows, countBy, dishonesty, eventually, fitsFixedWindows, fleetDelta, fleetDeltas, hammer, header, scrapeFleet, startFleet, statusOf
} from './fleet.js'

const RULE = '* /v2/store/**'
const LIMIT = 20
const WINDOW_MS = 2000
/** Between a sidecar spending a point and the upstream seeing the request, on a loaded machine. */
const JITTER_MS = 200
const LOAD_MS = 5000

t.setTimeout(120_000)

t.test('three sidecars, one Redis, one credential, one budget: together never over it', async (t) => {
  const redis = await startRedis(t)
  const { upstream, sidecars } = await startFleet(t, 3, {
    RATE_LIMITS: `${RULE} ${LIMIT}/2s`,
    RATE_LIMIT_MAX_WAIT_MS: '0',
    RATE_LIMIT_REDIS_URL: redis.url,
    // Generous: a slow command on two shared cores must not send a sidecar to memory here.
    RATE_LIMIT_REDIS_TIMEOUT_MS: '2000',
    ACCESS_LOG: 'false'
  })
  for (const s of sidecars) {
    await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (b) => b === 'redis')
  }
  const before = await scrapeFleet(sidecars)

  const started = performance.now()
  const load = hammer(sidecars, '/v2/store/orders', { perSidecar: 3, pauseMs: 20 })
  await sleep(LOAD_MS)
  await load.stop()
  const ended = performance.now()
  const seen = load.seen
  const after = await scrapeFleet(sidecars)

  const dishonest = seen.map((s) => ({ via: s.via, why: dishonesty(s, { rule: RULE, reason: 'budget', maxRetryAfterS: WINDOW_MS / 1000 }) })).filter((d) => d.why !== undefined)
  t.same(dishonest.slice(0, 5), [], `every caller got the upstream's 200 or a local 429 with Retry-After (${dishonest.length} of ${seen.length} did not)`)

  const passed = seen.filter((s) => s.status === 200)
  const refused = seen.filter((s) => s.status === 429)
  t.ok(refused.length > 0, `the load went over the budget (${refused.length} local 429s of ${seen.length})`)
  t.equal(upstream.arrivals.length, passed.length, 'the upstream saw exactly the calls answered with its 200')

  const times = upstream.arrivals.map((a) => a.at)
  const fit = fitsFixedWindows(times, LIMIT, WINDOW_MS, JITTER_MS)
  t.ok(fit.ok, `the upstream's arrivals fit ${LIMIT} per ${WINDOW_MS} ms windows, for the fleet together ${fit.worst}`,
    { arrivalsMs: times.map((x) => Math.round(x - (times[0] ?? 0))).join(' ') })
  // The budget is used, not just kept: at least two windows' worth in the run.
  t.ok(passed.length >= 2 * LIMIT, `the fleet used its budget (${passed.length} sent in ${LOAD_MS} ms)`)
  t.ok(passed.length <= LIMIT * (Math.ceil((ended - started) / WINDOW_MS) + 1), `and no more than ${LIMIT} per window started (${passed.length})`)

  // Retry-After keeps its word: under continuous load the freed budget is taken at once,
  // so some request reaches the upstream by the time a refusal said to come back (a
  // second of slack for callers slowed by a loaded machine).
  const promised = (r: typeof refused[number]): number => r.doneAt + Number(header(r, 'retry-after')) * 1000 + 1000
  const late = refused.filter((r) => promised(r) < ended - 200)
    .filter((r) => !upstream.arrivals.some((a) => a.at >= r.sentAt && a.at <= promised(r)))
  t.equal(late.length, 0, 'the budget freed within every refusal\'s Retry-After')

  t.same(fleetDeltas(before, after, 'store_auth_proxy_requests_total'),
    countBy(seen, (s) => `{method="GET",outcome="completed",status_class="${Math.floor((s.status ?? 0) / 100)}xx"}`),
    'requests_total summed over the fleet counts what the callers saw')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_errors_total'), refused.length === 0 ? {} : { '{code="UPSTREAM_RATE_LIMITED"}': refused.length },
    'errors_total: the local 429s, as UPSTREAM_RATE_LIMITED')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_rate_limited_total'), { [`{action="refused",reason="budget",rule="${RULE}"}`]: refused.length },
    'rate_limited_total: every local 429 refused for the budget, none delayed (RATE_LIMIT_MAX_WAIT_MS=0)')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_rate_limit_upstream_answers_total'), {}, 'no gateway rate-limit answer seen')
  t.equal(fleetDelta(before, after, 'store_auth_proxy_rate_limit_redis_fallbacks_total', {}), 0, 'no sidecar fell back to memory')
  for (const [i, s] of sidecars.entries()) {
    t.equal(after[i]?.get('store_auth_proxy_rate_limit_backend{backend="redis"}'), 1, `sidecar ${s.name}: backend redis`)
    t.equal(after[i]?.get('store_auth_proxy_rate_limit_backend{backend="memory"}'), 0, `sidecar ${s.name}: not memory`)
    t.equal(after[i]?.get('store_auth_proxy_rate_limit_redis_up{}'), 1, `sidecar ${s.name}: redis up`)
  }
  t.comment(`windows from their first arrival: ${chainWindows(times, WINDOW_MS)}; load ran ${Math.round(ended - started)} ms`)
  t.comment(`${seen.length} calls: ${passed.length} sent, ${refused.length} refused; by sidecar ${JSON.stringify(countBy(passed, (s) => s.via))}`)
})
