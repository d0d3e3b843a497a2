// Across the fleet: with RATE_LIMIT_MAX_WAIT_MS longer than the window,
// a burst of twice the budget through three sidecars on one Redis is smoothed, not
// refused: the second half waits for the next window and is sent then. A caller that
// leaves while waiting is never sent and spends nothing: the next window is whole.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { request } from 'undici'
import { startRedis } from '../helpers/redis.js'
import { callVia, eventually, fitsFixedWindows, fleetDeltas, ID_HEADER, nextId, scrapeFleet, startFleet, statusOf } from './fleet.js'

const RULE = '* /v2/store/**'
const LIMIT = 4
const WINDOW_MS = 1000

t.setTimeout(120_000)

t.test('a burst of twice the budget through three sidecars: half sent at once, half in the next window, none refused', async (t) => {
  const redis = await startRedis(t)
  const { upstream, sidecars } = await startFleet(t, 3, {
    RATE_LIMITS: `${RULE} ${LIMIT}/1s`, RATE_LIMIT_MAX_WAIT_MS: '3000', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '2000', ACCESS_LOG: 'false'
  })
  const [a, b, c] = sidecars
  if (a === undefined || b === undefined || c === undefined) throw new Error('three sidecars')
  for (const s of sidecars) await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (v) => v === 'redis')
  const before = await scrapeFleet(sidecars)

  const burst = await Promise.all(Array.from({ length: 2 * LIMIT }, async (_, i) => await callVia(sidecars[i % 3] ?? a, '/v2/store/orders')))
  t.same(burst.map((s) => s.status), Array.from({ length: 2 * LIMIT }, () => 200), 'every call of the burst answered by the upstream')
  const times = upstream.arrivals.map((x) => x.at).sort((x, y) => x - y)
  t.ok(fitsFixedWindows(times, LIMIT, WINDOW_MS, 200).ok, `${LIMIT} per window, the fleet together`, { arrivalsMs: times.map((x) => Math.round(x - (times[0] ?? 0))) })
  const first = times[0] ?? 0
  const late = times.filter((x) => x - first >= WINDOW_MS * 0.5).length
  t.ok(late >= LIMIT, `the second half waited for the next window (${late} sent ${WINDOW_MS / 2} ms or more after the first)`)

  const afterBurst = await scrapeFleet(sidecars)
  t.same(fleetDeltas(before, afterBurst, 'store_auth_proxy_rate_limited_total'), { [`{action="delayed",reason="budget",rule="${RULE}"}`]: LIMIT },
    'rate_limited_total: the waiting half counted as delayed, none refused')

  // A caller that leaves while waiting. Let the windows the burst used pass first.
  await sleep(2 * WINDOW_MS + 200)
  const full = await Promise.all(Array.from({ length: LIMIT }, async (_, i) => await callVia(sidecars[i % 3] ?? a, '/v2/store/orders')))
  t.same(full.map((s) => s.status), Array.from({ length: LIMIT }, () => 200), 'a fresh window: the budget spent')
  const leaving = nextId('leaving')
  const left = await request(b.proxyUrl + '/v2/store/orders', { headers: { [ID_HEADER]: leaving }, signal: AbortSignal.timeout(200) })
    .then((r) => `answered ${r.statusCode}`, (e: Error) => e.name)
  t.not(left.startsWith('answered'), true, `the caller left while waiting (${left})`)
  // Into the window it waited for (the one after the budget was spent): had it kept a
  // point there, one of the next calls would wait for the window after.
  await sleep(Math.max(0, Math.min(...full.map((s) => s.doneAt)) + WINDOW_MS + 150 - performance.now()))
  const next = await Promise.all(Array.from({ length: LIMIT }, async (_, i) => await callVia(sidecars[(i + 1) % 3] ?? a, '/v2/store/orders')))
  t.same(next.map((s) => s.status), Array.from({ length: LIMIT }, () => 200), 'the next window: the whole budget')
  const slow = next.filter((s) => s.doneAt - s.sentAt > WINDOW_MS * 0.6).map((s) => Math.round(s.doneAt - s.sentAt))
  t.same(slow, [], `none of them waited: the caller that left spent nothing (${next.map((s) => Math.round(s.doneAt - s.sentAt)).join(', ')} ms)`)
  await sleep(WINDOW_MS)
  t.equal(upstream.arrivals.filter((x) => x.id === leaving).length, 0, 'the caller that left was never sent')
})
