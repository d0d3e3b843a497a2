// Redis killed mid-run under load, then restarted empty, costs no caller an error and never
// puts the fleet over its budget. Each sidecar goes degraded and says so once (warn), in
// /readyz (still 200), in /status and in the metrics; cut off for less than a window after
// Redis last counted it present, it sends nothing (honest 429s); when Redis is back, empty,
// every limit is refused for one window (its tally was lost), then shared again.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { parseMetrics } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import {
  chainWindows, countBy, dishonesty, eventually, fitsFixedWindows, fleetDeltas, getText, hammer, scrapeFleet, scrapeText, secretsOf, startFleet, statusOf, type Sidecar
} from './fleet.js'

const RULE = '* /v2/store/**'
const LIMIT = 20
const WINDOW_MS = 2000
const JITTER_MS = 200

t.setTimeout(150_000)

/** The sidecar's log lines about Redis (level and message), in order, access log left out. */
function redisLines (s: Sidecar): Array<{ level: number, msg: string }> {
  return s.logs().filter((e) => /redis/i.test(JSON.stringify({ msg: e.msg, backend: e.backend })) && e.req === undefined && e.res === undefined)
    .map((e) => ({ level: Number(e.level), msg: String(e.msg) }))
}

t.test('Redis killed mid-run under load, then restarted: no caller error, fallback and return each said once', async (t) => {
  const redis = await startRedis(t)
  const { upstream, sidecars, tokenEndpoint } = await startFleet(t, 3, {
    RATE_LIMITS: `${RULE} ${LIMIT}/2s`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '1000', ACCESS_LOG: 'false'
  })
  for (const s of sidecars) await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (b) => b === 'redis')
  const before = await scrapeFleet(sidecars)
  const linesBefore = sidecars.map((s) => redisLines(s).length)

  const load = hammer(sidecars, '/v2/store/orders', { perSidecar: 2, pauseMs: 30 })
  await sleep(1500)
  await redis.stop()
  const killedAt = performance.now()

  // Down: every sidecar on memory, ready, and saying why.
  for (const s of sidecars) {
    const status = await eventually(`sidecar ${s.name} falls back to memory`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'memory')
    t.match(status, { degraded: true, redis: { url: redis.url, up: false } }, `sidecar ${s.name}: /status says degraded, Redis ${redis.url} down`)
    const ready = await getText(s.adminUrl + '/readyz')
    t.equal(ready.status, 200, `sidecar ${s.name}: /readyz stays 200`)
    t.match(ready.body, /redis/i, `sidecar ${s.name}: /readyz says why (${ready.body.slice(0, 200)})`)
    const metrics = parseMetrics(await scrapeText(s))
    t.equal(metrics.get('store_auth_proxy_rate_limit_backend{backend="memory"}'), 1, `sidecar ${s.name}: backend{backend="memory"} 1`)
    t.equal(metrics.get('store_auth_proxy_rate_limit_backend{backend="redis"}'), 0, `sidecar ${s.name}: backend{backend="redis"} 0`)
    t.equal(metrics.get('store_auth_proxy_rate_limit_redis_up{}'), 0, `sidecar ${s.name}: redis_up 0`)
  }
  await sleep(Math.max(0, killedAt + 3000 - performance.now()))

  await redis.start()
  const restartedAt = performance.now()
  for (const s of sidecars) {
    await eventually(`sidecar ${s.name} returns to redis`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'redis' && r.redis?.up === true, 30_000)
  }
  const backAt = performance.now()
  await sleep(4500)
  await load.stop()
  const after = await scrapeFleet(sidecars)
  const seen = load.seen

  // A degraded refusal's Retry-After reaches to when the sidecar's share is safe to spend: the
  // Redis timeout + the presence TTL (3 s) + one window after its last Redis command.
  const maxRetryAfterS = (1000 + 3000 + WINDOW_MS) / 1000
  const dishonest = seen.map((s) => ({ via: s.via, why: dishonesty(s, { rule: RULE, reason: 'budget', maxRetryAfterS }) })).filter((d) => d.why !== undefined)
  t.same(dishonest.slice(0, 5), [], `no caller got an error: only the upstream's 200 or an honest local 429 (${dishonest.length} of ${seen.length} not)`)
  // Down for 3 s: less than the timeout + presence TTL + one window after each sidecar's last
  // Redis command, so no sidecar may spend its share yet (the others could not have kept it free).
  const duringOutage = upstream.arrivals.filter((a) => a.at > killedAt + JITTER_MS && a.at < restartedAt)
  t.same(duringOutage.length, 0, 'nothing was sent while Redis was down: the fleet could not know its tally')
  t.ok(seen.some((s) => s.sentAt > killedAt && s.sentAt < backAt && s.status === 429), 'callers were answered (429) while Redis was down')
  // Back, empty: the tally of the last window was lost, so every limit is refused for one window.
  const gated = upstream.arrivals.filter((a) => a.at >= restartedAt && a.at < restartedAt + WINDOW_MS - JITTER_MS)
  t.same(gated.length, 0, 'Redis came back empty: nothing sent for one window')

  const back = upstream.arrivals.filter((a) => a.at >= backAt).map((a) => a.at)
  const fit = fitsFixedWindows(back, LIMIT, WINDOW_MS, JITTER_MS)
  t.ok(fit.ok, `with Redis back, the fleet's arrivals fit ${LIMIT} per ${WINDOW_MS} ms together again ${fit.worst}`,
    { windows: chainWindows(back, WINDOW_MS) })
  t.ok(back.length >= LIMIT, `and the budget is used (${back.length} sent after the return)`)

  for (const [i, s] of sidecars.entries()) {
    const lines = redisLines(s).slice(linesBefore[i])
    const warns = lines.filter((l) => l.level === 40)
    t.equal(warns.filter((l) => /unreachable/.test(l.msg)).length, 1, `sidecar ${s.name}: the fallback logged once, as a warning`, { lines })
    t.equal(warns.filter((l) => /lost its data/.test(l.msg)).length, 1, `sidecar ${s.name}: the lost tally logged once, as a warning`, { lines })
    t.equal(warns.length, 2, `sidecar ${s.name}: no other warning about Redis`, { lines })
    const afterWarn = lines.slice(lines.findIndex((l) => l.level === 40) + 1)
    t.equal(afterWarn.filter((l) => l.level === 30).length, 1, `sidecar ${s.name}: the return to Redis logged once (info)`, { lines })
    t.same(lines.filter((l) => l.level >= 50), [], `sidecar ${s.name}: no ERROR line about Redis`)
    t.equal(after[i]?.get('store_auth_proxy_rate_limit_backend{backend="redis"}'), 1, `sidecar ${s.name}: backend redis again`)
    t.equal(after[i]?.get('store_auth_proxy_rate_limit_redis_up{}'), 1, `sidecar ${s.name}: redis_up 1 again`)
    t.equal((after[i]?.get('store_auth_proxy_rate_limit_redis_fallbacks_total{}') ?? 0) - (before[i]?.get('store_auth_proxy_rate_limit_redis_fallbacks_total{}') ?? 0), 1,
      `sidecar ${s.name}: redis_fallbacks_total grew by one`)
    const leaks = secretsOf(tokenEndpoint.issued).filter((secret) => s.output().includes(secret))
    t.equal(leaks.length, 0, `sidecar ${s.name}: no secret or token in its output`)
  }

  const refused = seen.filter((s) => s.status === 429).length
  t.same(fleetDeltas(before, after, 'store_auth_proxy_requests_total'),
    countBy(seen, (s) => `{method="GET",outcome="completed",status_class="${Math.floor((s.status ?? 0) / 100)}xx"}`),
    'requests_total summed over the fleet counts what callers saw')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_errors_total'), refused === 0 ? {} : { '{code="UPSTREAM_RATE_LIMITED"}': refused },
    'errors_total: only the local 429s')
  const limited = fleetDeltas(before, after, 'store_auth_proxy_rate_limited_total')
  t.equal(Object.values(limited).reduce((a, b) => a + b, 0), refused, 'rate_limited_total counts the local 429s')
  t.same(Object.keys(limited).filter((k) => !/^\{action="refused",reason="(budget|degraded)",rule=/.test(k)), [], 'as budget or degraded refusals')
  t.ok((limited[`{action="refused",reason="degraded",rule="${RULE}"}`] ?? 0) > 0, 'some of them degraded')
  t.comment(`${seen.length} calls, ${seen.length - refused} sent, ${refused} refused; after the return: ${chainWindows(back, WINDOW_MS)}`)
})
