// Where the features meet, case 2 (the cache's side): the fleet's copies in Redis never make Redis evict or
// refuse a budget's key. Their bytes are bounded by CACHE_REDIS_MAX_BYTES in the same atomic
// step as each store, which evicts only the cache's own entries; every key of the cache has a
// TTL; a store never makes an answer look younger than it is, nor replaces a newer one.
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { createSharedCache, LEDGER_OVERHEAD_BYTES, type SharedCache } from '../../src/cache/redis-cache.js'
import { encodeEntry, type Entry } from '../../src/cache/entries.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { DAY, catalogBody, startTi } from './fixture.js'
import { fleetSidecar } from './fleet-ready.js'

const PREFIX = 'sap:test:'
const HOUR = 3_600_000

const entry = (over: Partial<Entry> = {}): Entry => ({
  status: 200,
  headers: { 'content-type': 'application/json' },
  body: Buffer.alloc(1000, 'x'),
  freshMs: 10 * HOUR,
  staleMs: 0,
  initialAgeMs: 0,
  vary: [],
  rule: 'GET /r',
  display: '/r',
  uri: 'u0',
  storedAt: performance.now(),
  ...over
})

/** What one entry like `entry()` costs the ledger (lifetimes of 8 digits, a date of 13). */
const COST = encodeEntry(entry(), Date.now()).length + LEDGER_OVERHEAD_BYTES

async function setUp (t: Test, maxBytes: number): Promise<{ redis: FaultyRedis, cache: SharedCache, client: Redis }> {
  const redis = await startRedis(t)
  const cache = createSharedCache({ url: redis.url, timeoutMs: 1_000, prefix: PREFIX, now: () => performance.now(), maxBytes })
  await cache.start()
  t.teardown(() => cache.close())
  const client = new Redis(redis.url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return { redis, cache, client }
}

t.test('at most CACHE_REDIS_MAX_BYTES: the entries nearest their end are evicted first, and nothing but the cache\'s own', async (t) => {
  const { cache, client } = await setUp(t, 3 * COST)
  // A budget's keys: one without a TTL, one with.
  await client.set(`${PREFIX}epoch`, 'e1')
  await client.zadd(`${PREFIX}log:GET /r:1/1h`, 1, 'send-1')
  await client.pexpire(`${PREFIX}log:GET /r:1/1h`, HOUR)
  const lives = [15, 11, 14, 12, 13]
  const replies = []
  for (const [i, hours] of lives.entries()) replies.push(await cache.set(`id${i}`, entry({ freshMs: hours * HOUR, uri: `u${i}` })))
  t.same(replies.map((r) => r.outcome), ['stored', 'stored', 'stored', 'stored', 'stored'])
  t.same(replies.map((r) => r.heldBytes), [COST, 2 * COST, 3 * COST, 3 * COST, 3 * COST])
  t.same(replies.map((r) => r.evictedBytes), [0, 0, 0, COST, COST])
  // id1 (11 h) went for id3, then id3 (12 h) for id4.
  t.same(await Promise.all(lives.map(async (_, i) => await client.exists(`${PREFIX}cache:id${i}`))), [1, 0, 1, 0, 1])
  t.equal(await client.get(`${PREFIX}epoch`), 'e1', 'the budget\'s keys are untouched')
  t.equal(await client.zcard(`${PREFIX}log:GET /r:1/1h`), 1)
  // Every key of the cache lapses.
  const keys = (await client.keys(`${PREFIX}cache*`)).sort()
  t.same(keys, [`${PREFIX}cache-ledger`, `${PREFIX}cache-sizes`, ...[0, 1, 2, 3, 4].map((i) => `${PREFIX}cache-uri:u${i}`), ...[0, 2, 4].map((i) => `${PREFIX}cache:id${i}`)].sort())
  for (const key of keys) {
    const ttl = await client.pttl(key)
    t.ok(ttl > 0 && ttl <= 15 * HOUR, `${key} lapses (${ttl} ms)`)
  }
  t.ok(await client.pttl(`${PREFIX}cache-ledger`) > 14 * HOUR, 'the ledger lives as long as its longest entry')
  // Replacing an entry counts it once.
  t.same((await cache.set('id0', entry({ freshMs: 15 * HOUR, uri: 'u0' }))).heldBytes, 3 * COST)
  const larger = await cache.set('big', entry({ body: Buffer.alloc(3 * COST) }))
  t.same(larger, { outcome: 'too-large', heldBytes: -1, evictedBytes: 0 }, 'larger than the whole bound: not sent')
  t.equal(await client.exists(`${PREFIX}cache:big`), 0)
})

t.test('the ledger forgets entries past their life; an invalidation takes their bytes off', async (t) => {
  const { cache, client } = await setUp(t, 10 * COST)
  await cache.set('short', entry({ freshMs: 100, uri: 'uA', storedAt: performance.now() }))
  await cache.set('a-json', entry({ uri: 'uA' }))
  await cache.set('a-csv', entry({ uri: 'uA' }))
  await cache.set('b', entry({ uri: 'uB' }))
  await eventually(t, 'the short one lapsed', async () => await client.exists(`${PREFIX}cache:short`) === 0)
  t.equal((await cache.set('c', entry({ uri: 'uC' }))).heldBytes, 4 * COST, 'the lapsed one is off the ledger')
  t.same(await cache.invalidate('uA'), { dropped: 2, heldBytes: 2 * COST })
  t.equal(await client.exists(`${PREFIX}cache:a-json`, `${PREFIX}cache:a-csv`, `${PREFIX}cache-uri:uA`), 0)
  t.equal(await client.exists(`${PREFIX}cache:b`), 1)
  t.same(await cache.invalidate('uA'), { dropped: 0, heldBytes: 2 * COST }, 'twice: nothing more')
  t.same(await cache.invalidate('never'), { dropped: 0, heldBytes: 2 * COST })
  // The ledger's keys evicted apart from their entries (an allkeys policy): the count starts again.
  await client.del(`${PREFIX}cache-ledger`)
  const after = await cache.set('d', entry({ uri: 'uD', body: Buffer.alloc(9 * COST) }))
  t.same(after.outcome, 'stored')
  t.equal(after.heldBytes, encodeEntry(entry({ uri: 'uD', body: Buffer.alloc(9 * COST) }), Date.now()).length + LEDGER_OVERHEAD_BYTES)
})

t.test('a store is dated by Redis\'s clock: a late one ages by its delay, one past its life is refused, an older one never replaces a newer', async (t) => {
  const { redis, cache, client } = await setUp(t, 100 * COST)
  // Calibrated by a lookup; then Redis stalls while the store waits in its socket.
  await cache.get('x')
  const storedAt = performance.now()
  redis.freeze()
  const outcome = async (p: Promise<unknown>): Promise<string> => await p.then(() => 'answered', () => 'timed out')
  const late = outcome(cache.set('late', entry({ storedAt, freshMs: 60_000, uri: 'uL' })))
  const dead = outcome(cache.set('dead', entry({ storedAt, freshMs: 500, uri: 'uD' })))
  await new Promise((resolve) => setTimeout(resolve, 1_500))
  redis.thaw()
  t.equal(await late, 'timed out', 'the store timed out for the sidecar')
  t.equal(await dead, 'timed out')
  await eventually(t, 'the late store ran', async () => await client.exists(`${PREFIX}cache:late`) === 1)
  const ttl = await client.pttl(`${PREFIX}cache:late`)
  t.ok(ttl <= 60_000 - 1_500, `its TTL (${ttl} ms) counts the stall`)
  const { entry: found } = await cache.get('late')
  t.ok(found !== undefined && performance.now() - found.storedAt >= 1_500, 'its age counts the stall')
  t.equal(await client.exists(`${PREFIX}cache:dead`), 0, 'past its life when it arrived: refused')
  // An answer fetched earlier, stored after a newer one: refused.
  t.equal((await cache.set('k', entry({ storedAt: performance.now(), uri: 'uK', rule: 'newer' }))).outcome, 'stored')
  t.equal((await cache.set('k', entry({ storedAt: performance.now() - 5_000, uri: 'uK', rule: 'older' }))).outcome, 'newer')
  t.equal((await cache.get('k')).entry?.rule, 'newer')
  t.equal((await cache.set('gone', entry({ storedAt: performance.now() - 10_000, freshMs: 5_000, uri: 'uG' }))).outcome, 'late')
})

t.test('a value that is not an entry of this version is a miss, told to the watcher', async (t) => {
  const { cache, client } = await setUp(t, 100 * COST)
  const seen: string[] = []
  cache.onMalformed((id, why) => { seen.push(`${id}: ${why}`) })
  await client.set(`${PREFIX}cache:bad`, 'not an entry at all')
  t.same(await cache.get('bad'), { filling: false, unusable: true })
  t.same(await cache.get('none'), { filling: false })
  t.same(seen, ['bad: not an entry'])
})

t.test('a sidecar: bytes held and evicted in the metrics; CACHE_REDIS_MAX_BYTES=0 keeps nothing of the cache in Redis', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const rules = { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '1' }
  const s = await fleetSidecar(t, ti, { ...rules, CACHE_REDIS_MAX_BYTES: String(2 * (catalogBody().length + 1000)) }, options)
  const client = new Redis(redis.url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await client.connect()
  t.teardown(() => { client.disconnect() })
  const prefix = redisKeyPrefix(standIn.url, CLIENT_ID)
  for (const path of ['/v2/store/a', '/v2/store/b', '/v2/store/c']) {
    t.equal((await s.get(path)).status, 200)
    await eventually(t, `${path} in Redis`, async () => (await client.keys(`${prefix}cache:*`)).length >= 1 &&
      ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_cache_stores_total', { rule: 'GET /v2/store/**' })) ?? 0) >= 1)
  }
  await eventually(t, 'the third store evicted the first', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_cache_redis_evicted_bytes_total', {})) ?? 0) > catalogBody().length)
  const m = await scrape(s.adminUrl)
  const held = m.get(seriesKey('store_auth_proxy_cache_redis_bytes', {})) ?? 0
  t.ok(held > catalogBody().length && held <= 2 * (catalogBody().length + 1000), `${held} bytes held`)
  t.equal((await client.keys(`${prefix}cache:*`)).length, 2)

  const none = await startRedis(t)
  const off = await fleetSidecar(t, ti, { ...rules, CACHE_REDIS_MAX_BYTES: '0' }, { ...options, redisUrl: none.url })
  t.equal((await off.get('/v2/store/a')).status, 200)
  t.match((await off.get('/v2/store/a')).headers['cache-status'], '; hit', 'its own copy serves it')
  t.equal((await off.status()).cache !== undefined && ((await off.status()).cache as { shared: unknown }).shared, null, 'no Redis for the cache')
  const noneClient = new Redis(none.url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await noneClient.connect()
  t.teardown(() => { noneClient.disconnect() })
  t.same(await noneClient.keys('*cache*'), [], 'nothing of the cache in Redis')
})

t.test('an invalidation reaches every sidecar listening, also after Redis restarted', async (t) => {
  const { redis, cache } = await setUp(t, 100 * COST)
  const other = createSharedCache({ url: redis.url, timeoutMs: 1_000, prefix: PREFIX, now: () => performance.now(), maxBytes: 100 * COST })
  await other.start()
  t.teardown(() => other.close())
  const heard: string[] = []
  other.onInvalidated((uri) => { heard.push(uri) })
  await eventually(t, 'the first invalidation heard', async () => {
    await cache.invalidate('u1')
    return heard.includes('u1')
  })
  await redis.restart({ withData: false })
  await eventually(t, 'heard again after the restart', async () => {
    if (!cache.up()) return false
    await cache.invalidate('u2')
    return heard.includes('u2')
  })
  t.same([...new Set(heard)], ['u1', 'u2'])
})
