// The catalog scenario across a fleet: three sidecars on one credential share one Redis. The
// first caller's fetch reaches TI once; every other caller on every sidecar gets the same bytes
// from the fleet's copy. A Redis fault never fails a caller and never lets the fleet over its
// budget: with Redis gone, a sidecar serves its own copies, and a miss goes to the guard.
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { CATALOG, DAY, cacheSidecar, catalogBody, startTi } from './fixture.js'

const ENV = { RATE_LIMITS: `GET ${CATALOG} 1/4h cache=4h stale=1d`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '3' }

async function fleet (t: Test, redisUrl: string) {
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl, authUrl: standIn.url, systemClock: true }
  const sidecars = [await cacheSidecar(t, ti, ENV, options), await cacheSidecar(t, ti, ENV, options), await cacheSidecar(t, ti, ENV, options)]
  return { ti, sidecars }
}

t.test('one catalog call for the whole fleet: the others are hits from Redis, with Age', async (t) => {
  const redis = await startRedis(t)
  const { ti, sidecars: [a, b, c] } = await fleet(t, redis.url)
  const first = await a!.get(CATALOG)
  t.equal(first.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=14400')
  for (const s of [b!, c!, a!, b!, c!]) {
    const hit = await s.get(CATALOG)
    t.equal(hit.status, 200)
    t.equal(hit.body, catalogBody())
    t.match(hit.headers['cache-status'], /^store-auth-proxy; hit; ttl=14\d{3}$/)
    t.match(hit.headers.age, /^\d+$/)
  }
  t.equal(ti.received.length, 1, 'TI saw exactly one catalog call')
})

t.test('concurrent misses on every sidecar: one call to TI, the others wait for it through Redis', async (t) => {
  const redis = await startRedis(t)
  const { ti, sidecars } = await fleet(t, redis.url)
  ti.hold()
  const first = sidecars[0]!.get(CATALOG)
  await eventually(t, 'the first fetch held at TI', () => ti.waiting() === 1)
  const others = sidecars.flatMap((s) => Array.from({ length: 10 }, async () => await s.get(CATALOG)))
  // Every request is in, waiting (the fleet's waiters poll Redis), before TI answers.
  await eventually(t, 'all 31 requests in flight', async () => {
    const counts = await Promise.all(sidecars.map(async (s) => (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0))
    return counts.reduce((a, b) => a + b, 0) === 31
  })
  ti.release()
  const answers = [await first, ...await Promise.all(others)]
  t.same(answers.map((a) => a.status), answers.map(() => 200), 'every caller on every sidecar got the catalog')
  t.ok(answers.every((a) => a.body === catalogBody()))
  t.equal(ti.received.length, 1, 'TI saw one call')
})

t.test('Redis gone: no caller fails; copies held stay served; a miss goes to the guard (degraded: refused); never over budget', async (t) => {
  const redis = await startRedis(t)
  const { ti, sidecars: [a, b] } = await fleet(t, redis.url)
  t.equal((await a!.get(CATALOG)).status, 200)
  t.equal((await a!.get(CATALOG)).headers['cache-status'], 'store-auth-proxy; hit; ttl=14400')
  await redis.stop()
  const own = await a!.get(CATALOG)
  t.equal(own.status, 200, 'its own copy')
  t.match(own.headers['cache-status'], '; hit')
  const other = await b!.get(CATALOG)
  // b never held a copy, and with Redis gone its share of a 1/4h budget in a fleet of 3 is 0.
  t.equal(other.status, 429)
  t.equal(ti.received.length, 1)
  await redis.start()
})

t.test('Redis restarted empty, or frozen, while answers are cached: copies held are served, nobody waits long, TI sees no extra call', async (t) => {
  const redis = await startRedis(t)
  const { ti, sidecars: [a, b, c] } = await fleet(t, redis.url)
  t.equal((await a!.get(CATALOG)).status, 200)
  t.match((await b!.get(CATALOG)).headers['cache-status'], '; hit', 'b holds a copy from Redis')

  await redis.restart({ withData: false })
  const fromMemory = await a!.get(CATALOG)
  t.equal(fromMemory.status, 200)
  t.match(fromMemory.headers['cache-status'], '; hit')
  // c never held a copy: its miss goes to the guard, which refuses while the fleet's tally
  // cannot be trusted (Redis lost its data) — never a second call to TI.
  const lost = await c!.get(CATALOG)
  t.equal(lost.status, 429)
  t.equal(ti.received.length, 1)

  redis.freeze()
  t.teardown(() => { redis.thaw() })
  const started = performance.now()
  const frozen = await Promise.all([a!.get(CATALOG), b!.get(CATALOG), c!.get(CATALOG)])
  t.same(frozen.map((r) => r.status), [200, 200, 429], 'copies held answer; a miss is refused, not hung')
  t.ok(performance.now() - started < 5_000, 'nobody waited on the frozen Redis for long')
  redis.thaw()
  t.equal(ti.received.length, 1)
})

t.test('a burst on a sidecar holding no copy reads the entry from Redis once, and every caller gets it', async (t) => {
  const redis = await startRedis(t)
  const { ti, sidecars: [a, b] } = await fleet(t, redis.url)
  t.equal((await a!.get(CATALOG)).status, 200)
  const admin = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  await admin.connect()
  t.teardown(() => { admin.disconnect() })
  const gets = async (): Promise<number> => Number(/cmdstat_get:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0)
  const before = await gets()
  // Redis holds every lookup until all 64 are in: each would otherwise read the entry alone.
  redis.freeze()
  const pending = Array.from({ length: 64 }, async () => await b!.get(CATALOG))
  await eventually(t, '64 requests in flight at b', async () =>
    (await scrape(b!.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) === 64)
  redis.thaw()
  const burst = await Promise.all(pending)
  t.same([...new Set(burst.map((r) => r.status))], [200], 'every caller got the catalog (the budget is spent: a miss would be a 429)')
  t.ok(burst.every((r) => r.body === catalogBody()))
  t.ok(await gets() - before <= 2, `Redis read the entry once per burst, not per caller (${await gets() - before})`)
  t.equal(ti.received.length, 1)
})
