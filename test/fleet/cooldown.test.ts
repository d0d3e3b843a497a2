// A 429 with `Retry-After: 5` answered to one call through sidecar A
// cools down all three sidecars on the credential: calls through B and C (and A) get a
// local 429 with a Retry-After counting down from 5, and the upstream sees nothing, until
// the five seconds are over; then calls go through again.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import { callVia, dishonesty, eventually, fleetDeltas, header, nextId, scrapeFleet, startFleet, statusOf, type Seen } from './fleet.js'

const SPIKE_ARREST = '{"fault":{"faultstring":"Spike arrest violation. Allowed rate : 5ps","detail":{"errorcode":"policies.ratelimit.SpikeArrestViolation"}}}'
const RETRY_AFTER_S = 5

t.setTimeout(90_000)

t.test('a 429 with Retry-After: 5 through one sidecar cools down all three for 5 s', async (t) => {
  const redis = await startRedis(t)
  // No rules: the scope of a cool-down is the whole upstream (contract, Behaviour).
  const { upstream, sidecars } = await startFleet(t, 3, { RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '2000', ACCESS_LOG: 'false' })
  const [a, b, c] = sidecars
  if (a === undefined || b === undefined || c === undefined) throw new Error('three sidecars')
  for (const s of sidecars) await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (v) => v === 'redis')
  const before = await scrapeFleet(sidecars)

  const id = nextId('limited')
  upstream.plan(id, { status: 429, headers: { 'content-type': 'application/json', 'retry-after': String(RETRY_AFTER_S), 'x-apigee': 'kept' }, body: SPIKE_ARREST })
  const first = await callVia(a, '/v2/store/orders', { id })
  const wallAtAnswer = Date.now()
  t.equal(first.status, 429, 'the gateway\'s 429 reaches its caller')
  t.equal(first.body, SPIKE_ARREST, 'with its body byte for byte')
  t.equal(header(first, 'retry-after'), String(RETRY_AFTER_S), 'and its Retry-After')
  t.equal(header(first, 'x-apigee'), 'kept', 'and its other headers')
  t.equal(upstream.arrivals.length, 1)

  // Calls through B, C and A, round and round, for the next 3.5 s (a second and a half
  // of slack for a loaded machine before the cool-down's end).
  const during: Seen[] = []
  const order = [b, c, a]
  for (let i = 0; performance.now() - first.doneAt < (RETRY_AFTER_S - 1.5) * 1000; i++) {
    const sidecar = order[i % 3] ?? b
    during.push(await callVia(sidecar, i % 2 === 0 ? '/v2/store/orders' : '/anything/else?x=1', { method: i % 4 === 3 ? 'POST' : 'GET' }))
    await sleep(150)
  }
  t.equal(upstream.arrivals.length, 1, `the upstream saw nothing of the ${during.length} calls made during the cool-down`)
  const wrong = during.map((s) => ({ via: s.via, why: dishonesty(s, { rule: 'upstream', reason: 'cooldown', maxRetryAfterS: RETRY_AFTER_S }) }))
    .filter((w) => w.why !== undefined)
  t.same(wrong, [], 'every one got a local 429 UPSTREAM_RATE_LIMITED naming the scope `upstream` and the cool-down')
  t.same(new Set(during.map((s) => s.via)), new Set(['A', 'B', 'C']), 'through all three sidecars')
  // Retry-After counts down to the end of the 5 s: the ceiling of what is left, ±1 s for
  // where within the first call the sidecar started the cool-down.
  const offBy = during.filter((s) => {
    const retryAfter = Number(header(s, 'retry-after'))
    const leftAtMost = RETRY_AFTER_S - (s.sentAt - first.doneAt) / 1000
    const leftAtLeast = RETRY_AFTER_S - (s.doneAt - first.sentAt) / 1000
    return retryAfter > Math.ceil(leftAtMost) + 1 || retryAfter < Math.max(1, Math.floor(leftAtLeast))
  }).map((s) => ({ via: s.via, retryAfter: header(s, 'retry-after'), msAfterFirst: Math.round(s.sentAt - first.doneAt) }))
  t.same(offBy, [], 'Retry-After is the seconds left of the cool-down')

  for (const s of sidecars) {
    const cooldowns = (await statusOf(s)).rateLimits?.cooldowns ?? []
    const until = Date.parse(cooldowns.find((cd) => cd.rule === 'upstream')?.until ?? '')
    t.ok(Math.abs(until - (wallAtAnswer + RETRY_AFTER_S * 1000)) < 1500, `sidecar ${s.name}: /status shows the cool-down of upstream until ~5 s after the answer`, { cooldowns })
  }
  const mid = await scrapeFleet([a])
  const gauge = mid[0]?.get('store_auth_proxy_rate_limit_cooldown_until_seconds{rule="upstream"}') ?? 0
  t.ok(Math.abs(gauge - (wallAtAnswer / 1000 + RETRY_AFTER_S)) < 1.5, `sidecar A: cooldown_until_seconds{rule="upstream"} is the end, in unix seconds (${gauge})`)

  // After the five seconds: through again, on every sidecar.
  await sleep(Math.max(0, first.doneAt + RETRY_AFTER_S * 1000 + 700 - performance.now()))
  const afterwards = [await callVia(a, '/v2/store/orders'), await callVia(b, '/v2/store/orders'), await callVia(c, '/v2/store/orders')]
  t.same(afterwards.map((s) => s.status), [200, 200, 200], 'after the cool-down, calls through A, B and C reach the upstream')
  t.equal(upstream.arrivals.length, 4)

  const after = await scrapeFleet(sidecars)
  t.same(fleetDeltas(before, after, 'store_auth_proxy_rate_limit_upstream_answers_total'), { '{rule="upstream"}': 1 }, 'one gateway rate-limit answer seen, in the fleet')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_rate_limited_total'), { '{action="refused",reason="cooldown",rule="upstream"}': during.length },
    'every local 429 counted as refused for the cool-down')
  t.same(fleetDeltas(before, after, 'store_auth_proxy_errors_total'), { '{code="UPSTREAM_RATE_LIMITED"}': during.length }, 'and as UPSTREAM_RATE_LIMITED')
  const posts = during.filter((_, i) => i % 4 === 3).length
  const expected: Record<string, number> = {
    '{method="GET",outcome="completed",status_class="2xx"}': 3,
    '{method="GET",outcome="completed",status_class="4xx"}': 1 + during.length - posts
  }
  if (posts > 0) expected['{method="POST",outcome="completed",status_class="4xx"}'] = posts
  t.same(fleetDeltas(before, after, 'store_auth_proxy_requests_total'), expected, 'requests_total summed over the fleet counts what callers saw')
})
