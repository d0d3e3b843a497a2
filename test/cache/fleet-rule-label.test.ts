// A sidecar counts its callers' cache results under its own rules, whichever sidecar's fetch
// answered them: two sidecars on one Redis whose rules for a path are named differently (a
// rolling change of RATE_LIMITS), one fetch of A's answering B's fetch and B's waiter.
import t from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { DAY, cacheSidecar, startTi } from './fixture.js'

const A_RULE = 'GET /v2/store/**'
const B_RULE = 'GET /v2/store/x'
const counted = (m: Samples): Record<string, number> => {
  const out: Record<string, number> = {}
  for (const rule of [A_RULE, B_RULE]) {
    for (const result of ['hit', 'coalesced', 'stale', 'miss']) {
      const v = m.get(seriesKey('store_auth_proxy_cache_requests_total', { rule, result })) ?? 0
      if (v > 0) out[`${rule} ${result}`] = v
    }
  }
  return out
}
const inFlightOf = async (s: { adminUrl: string }): Promise<number> =>
  (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0

t.test('B\'s fetch and B\'s waiter answered by A\'s one fetch: counted under B\'s rule', async (t) => {
  const ti = await startTi(t)
  const redis = await startRedis(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const common = { RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '2' }
  const a = await cacheSidecar(t, ti, { ...common, RATE_LIMITS: `${A_RULE} 100/1h cache=1h` }, options)
  const b = await cacheSidecar(t, ti, { ...common, RATE_LIMITS: `${B_RULE} 100/1h cache=1h` }, options)
  ti.hold()
  const first = a.get('/v2/store/x')
  await eventually(t, 'A\'s fetch held at TI', () => ti.waiting() === 1)
  const bFetch = b.get('/v2/store/x')
  await eventually(t, 'B\'s fetch waits for A\'s', async () => await inFlightOf(b) === 1)
  const bWaiter = b.get('/v2/store/x')
  await eventually(t, 'B\'s waiter in', async () => await inFlightOf(b) === 2)
  ti.release()
  t.same([(await first).status, (await bFetch).status, (await bWaiter).status], [200, 200, 200])
  t.same(counted(await b.metrics()), { [`${B_RULE} coalesced`]: 2 })
  t.same(counted(await a.metrics()), { [`${A_RULE} miss`]: 1 })
  t.equal(ti.received.length, 1, 'one fetch for the fleet')
  // Served from B's own copy now: a hit, under B's rule too.
  t.equal((await b.get('/v2/store/x')).status, 200)
  t.same(counted(await b.metrics()), { [`${B_RULE} coalesced`]: 2, [`${B_RULE} hit`]: 1 })
})
