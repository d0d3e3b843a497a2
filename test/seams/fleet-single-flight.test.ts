// Where the features meet, cases 1 and 6: one fetch for the whole fleet that cannot race the budget. Deciding
// "this sidecar fetches" is a claim in Redis, taken atomically (and only if no newer entry is
// there); only the claimant asks its budget. Every other caller of the key, on any sidecar, waits
// for that fetch: it gets its answer (or its failure), never a budget refusal. Stale refreshes
// are claimed the same way: one budget point per refresh for the fleet.
import t, { type Test } from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { CATALOG, DAY, cacheSidecar, catalogBody, startTi, type CacheSidecar, type Ti } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: `GET ${CATALOG} 1/4h cache=4h stale=1d`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '3', RATE_LIMIT_REDIS_TIMEOUT_MS: '1000' }

async function fleet (t: Test, env: Record<string, string> = ENV): Promise<{ ti: Ti, sidecars: CacheSidecar[] }> {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const sidecars = await Promise.all([0, 1, 2].map(async () => await cacheSidecar(t, ti, env, options)))
  for (const s of sidecars) {
    await eventually(t, 'the sidecar on redis', async () => ((await s.status()).rateLimits as { backend: string }).backend === 'redis')
  }
  return { ti, sidecars }
}

const refusals = async (sidecars: CacheSidecar[]): Promise<number> => {
  let n = 0
  for (const s of sidecars) n += (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_errors_total', { code: 'UPSTREAM_RATE_LIMITED' })) ?? 0
  return n
}

t.test('case 1: a cold fleet of 3 on one Redis, 30 concurrent catalog callers spread over it: TI sees one call, all 30 get 200', async (t) => {
  const { ti, sidecars } = await fleet(t)
  ti.hold()
  const answers = Promise.all(Array.from({ length: 30 }, async (_, i) => await sidecars[i % 3]!.get(CATALOG)))
  await eventually(t, 'the fleet\'s one fetch held at TI', () => ti.waiting() === 1)
  ti.release()
  const got = await answers
  t.same(got.map((a) => a.status), got.map(() => 200), 'no caller was refused while the fleet fetched the catalog')
  t.ok(got.every((a) => a.body === catalogBody()))
  t.equal(ti.received.length, 1, 'TI saw exactly one call')
  t.equal(await refusals(sidecars), 0, 'no budget refusal anywhere')
})

t.test('case 1: the fleet\'s fetch fails: every caller on every sidecar gets its failure, none a budget refusal', async (t) => {
  const { ti, sidecars } = await fleet(t)
  ti.answer(() => ({ status: 503, headers: { 'content-type': 'text/plain' }, body: 'catalog service down' }))
  ti.hold()
  const answers = Promise.all(Array.from({ length: 12 }, async (_, i) => await sidecars[i % 3]!.get(CATALOG)))
  await eventually(t, 'the fleet\'s one fetch held at TI', () => ti.waiting() === 1)
  ti.release()
  const got = await answers
  t.same(got.map((a) => `${a.status} ${a.body}`), got.map(() => '503 catalog service down'))
  t.equal(ti.received.length, 1)
  t.equal(await refusals(sidecars), 0)
})

t.test('case 6: a stale catalog refreshed by 30 callers over 3 sidecars: one refresh for the fleet, one budget point', async (t) => {
  // cache=2s: stale two seconds after it is stored; the budget allows one refresh per window.
  // (Redis tells a newer entry by its key's longer life: entries stored within 1 s of each other
  // are not told apart, which no cache= of a second or more meets.)
  const { ti, sidecars } = await fleet(t, { ...ENV, RATE_LIMITS: `GET ${CATALOG} 2/1h cache=2s stale=1d` })
  let n = 0
  ti.answer(() => ({ status: 200, headers: { 'content-type': 'application/json' }, body: `catalog ${++n}` }))
  for (const s of sidecars) t.equal((await s.get(CATALOG)).body, 'catalog 1', 'every sidecar holds the first copy')
  for (const s of sidecars) {
    await eventually(t, 'its copy stale', async () =>
      ((await s.status()).cache as { entries: Array<{ state: string }> }).entries.every((e) => e.state === 'stale'))
  }
  ti.hold()
  const answers = Promise.all(Array.from({ length: 30 }, async (_, i) => await sidecars[i % 3]!.get(CATALOG)))
  await eventually(t, 'the fleet\'s one refresh held at TI', () => ti.waiting() === 1)
  ti.release()
  const got = await answers
  t.same(got.map((a) => `${a.status} ${a.body}`), got.map(() => '200 catalog 2'), 'every caller got the refreshed catalog')
  t.equal(ti.received.length, 2, 'one refresh for the whole fleet')
})
