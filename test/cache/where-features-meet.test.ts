// Where the features meet, the read cache's cases: an entry of another layout in Redis (7), a write that
// leaves the stored GET in place (8), and HTTP's own rules for a shared cache (9), through
// real sidecars, a recording TI and (where the fleet matters) a real Redis.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { cacheKey } from '../../src/cache/policy.js'
import { ENTRY_VERSION } from '../../src/cache/entries.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { DAY, cacheSidecar, startTi } from './fixture.js'
import { fleetSidecar } from './fleet-ready.js'

const ASKS = { accept: 'application/json', 'accept-language': 'en', 'accept-encoding': 'identity' }
const env = (limits: string, more: Record<string, string> = {}): Record<string, string> =>
  ({ RATE_LIMITS: `* /v2/store/** ${limits}`, RATE_LIMIT_MAX_WAIT_MS: '0', ...more })

async function redisClient (t: Test, url: string): Promise<Redis> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return client
}

const entryKey = (authUrl: string, upstreamUrl: string, path: string): string =>
  `${redisKeyPrefix(authUrl, CLIENT_ID)}cache:${cacheKey(upstreamUrl, path, ASKS).id}`

/** An encoded value as the sidecar's Redis layout frames it: 4 bytes of length, the description, the body. */
function framed (description: unknown, body: string): Buffer {
  const json = Buffer.from(JSON.stringify(description))
  const head = Buffer.alloc(4)
  head.writeUInt32BE(json.length)
  return Buffer.concat([head, json, Buffer.from(body)])
}

t.test('case 7: an entry of another layout in Redis: the caller gets TI\'s answer, not 500; counted each time, logged once per key', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  // TI's answer is not storable: the foreign value stays, and every request meets it.
  ti.answer(() => ({ status: 200, headers: { 'cache-control': 'no-store' }, body: 'from TI' }))
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const s = await fleetSidecar(t, ti, env('100/1h cache=1h stale=1d'), { redisUrl: redis.url, authUrl: standIn.url, systemClock: true })
  const client = await redisClient(t, redis.url)
  // The layout before versions, without its headers (what made every caller of the key get 500).
  const old = { status: 200, freshMs: 3_600_000, staleMs: 0, initialAgeMs: 0, vary: [], rule: 'x', display: '/v2/store/a' }
  await client.set(entryKey(standIn.url, ti.url, '/v2/store/a'), framed(old, 'old bytes'), 'PX', 600_000)
  // A newer version's, complete in every field this one knows.
  const newer = { ...old, v: ENTRY_VERSION + 1, headers: {}, uri: 'u', storedAtMs: Date.now(), bytes: 9 }
  await client.set(entryKey(standIn.url, ti.url, '/v2/store/b'), framed(newer, 'new bytes'), 'PX', 600_000)
  for (const path of ['/v2/store/a', '/v2/store/a', '/v2/store/b', '/v2/store/a']) {
    const answer = await s.get(path, ASKS)
    t.equal(answer.status, 200, `${path} ${answer.body}`)
    t.equal(answer.body, 'from TI')
    t.equal(answer.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=no-store')
  }
  t.equal(ti.received.length, 4, 'each a miss')
  t.equal((await s.metrics()).get(seriesKey('store_auth_proxy_cache_redis_malformed_total', {})), 4)
  const logged = s.logs.entries().filter((e) => e.msg === 'read cache: a value in redis is not an entry of this version; taken as a miss')
  t.same(logged.map((e) => e.reason), ['another version', 'another version'], 'once per key')
  t.notMatch(s.logs.text(), /old bytes|new bytes/, 'never its content')
})

/**
 * Sidecar a fetches `/v2/store/a` for rule `cache=`; Redis stalls for `stallMs` while its
 * store is on the way (it waits in the socket past its timeout). Then Redis answers again.
 */
async function storeWhileRedisStalls (t: Test, cache: string, stallMs: number) {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const a = await fleetSidecar(t, ti, env(`100/1h cache=${cache}`), options)
  const b = await fleetSidecar(t, ti, env(`100/1h cache=${cache}`), options)
  ti.hold()
  const first = a.get('/v2/store/a', ASKS)
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  redis.freeze()
  t.teardown(() => { redis.thaw() })
  ti.release()
  t.equal((await first).status, 200)
  // The stall is the fault under test: time must pass while Redis holds the store.
  await sleep(stallMs)
  redis.thaw()
  return { redis, ti, b, key: entryKey(standIn.url, ti.url, '/v2/store/a') }
}

t.test('case 7: a store that reaches Redis late never makes the answer look younger than it is', async (t) => {
  const { redis, ti, b, key } = await storeWhileRedisStalls(t, '1h', 2_500)
  const client = await redisClient(t, redis.url)
  await eventually(t, 'the late store ran', async () => await client.exists(key) === 1)
  const hit = await b.get('/v2/store/a', ASKS)
  t.match(hit.headers['cache-status'], /^store-auth-proxy; hit; ttl=\d+$/)
  t.ok(Number(hit.headers.age) >= 2, `Age ${String(hit.headers.age)}: the stall counts in its age`)
  t.ok(Number(/ttl=(\d+)/.exec(String(hit.headers['cache-status']))?.[1]) <= 3598, 'and in its freshness')
  t.equal(ti.received.length, 1)
})

t.test('case 7: a store past the entry\'s whole life when it reaches Redis is refused', async (t) => {
  const { ti, b } = await storeWhileRedisStalls(t, '1s', 1_500)
  t.match((await b.get('/v2/store/a', ASKS)).headers['cache-status'], 'fwd=miss', 'nothing in Redis: fetched again')
  t.equal(ti.received.length, 2)
})

t.test('case 8: a cached GET, then a PUT of the same path: the next GET reaches TI', async (t) => {
  const ti = await startTi(t)
  let version = 0
  ti.answer((req) => ({ status: req.method === 'GET' ? 200 : 204, body: req.method === 'GET' ? `v${++version} of ${req.url}` : '' }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  t.equal((await s.get('/v2/store/a')).body, 'v1 of /v2/store/a')
  t.match((await s.get('/v2/store/a')).headers['cache-status'], '; hit')
  t.equal((await s.get('/v2/store/a', {}, 'PUT')).status, 204)
  const after = await s.get('/v2/store/a')
  t.equal(after.body, 'v2 of /v2/store/a', 'TI\'s new answer')
  t.match(after.headers['cache-status'], 'fwd=miss')
  t.same(ti.received.map((r) => r.method), ['GET', 'PUT', 'GET'])
  t.equal((await s.metrics()).get(seriesKey('store_auth_proxy_cache_invalidations_total', { where: 'memory' })), 1)
})

t.test('case 8: every variant of the target goes, and Location on the same origin; a failed write or another path keeps them', async (t) => {
  const ti = await startTi(t)
  let n = 0
  ti.answer((req) => {
    if (req.method === 'GET') return { status: 200, body: `${++n}` }
    if (req.url.endsWith('/fail')) return { status: 409, body: 'conflict' }
    return { status: 201, headers: { location: '/v2/store/b', 'content-location': 'https://elsewhere.example/v2/store/c' }, body: '' }
  })
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const paths: Array<[string, Record<string, string>]> = [
    ['/v2/store/a', {}], ['/v2/store/a', { accept: 'text/csv' }], ['/v2/store/b', {}], ['/v2/store/c', {}], ['/v2/store/a?page=2', {}]
  ]
  const first = new Map<string, string>()
  for (const [path, headers] of paths) first.set(path + JSON.stringify(headers), (await s.get(path, headers)).body)
  t.equal((await s.get('/v2/store/a/fail', {}, 'POST')).status, 409)
  for (const [path, headers] of paths) t.match((await s.get(path, headers)).headers['cache-status'], '; hit', `a failed write keeps ${path}`)
  t.equal((await s.get('/v2/store/a', {}, 'POST')).status, 201)
  const gone = ['/v2/store/a{}', '/v2/store/a{"accept":"text/csv"}', '/v2/store/b{}']
  for (const [path, headers] of paths) {
    const again = await s.get(path, headers)
    const key = path + JSON.stringify(headers)
    if (gone.includes(key)) t.not(again.body, first.get(key), `${key}: dropped, fetched again`)
    else t.match(again.headers['cache-status'], '; hit', `${key}: kept (another origin's Content-Location, another query)`)
  }
})

t.test('case 8 across the fleet: a write through one sidecar drops the fleet\'s copies, in Redis and in every sidecar\'s memory', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  let n = 0
  ti.answer((req) => ({ status: req.method === 'GET' ? 200 : 204, body: req.method === 'GET' ? `v${++n}` : '' }))
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const a = await fleetSidecar(t, ti, env('100/1h cache=1h'), options)
  const b = await fleetSidecar(t, ti, env('100/1h cache=1h'), options)
  const client = await redisClient(t, redis.url)
  t.equal((await a.get('/v2/store/a', ASKS)).body, 'v1')
  await eventually(t, 'the copy in Redis', async () => await client.exists(entryKey(standIn.url, ti.url, '/v2/store/a')) === 1)
  t.equal((await b.get('/v2/store/a', { ...ASKS, accept: 'text/csv' })).body, 'v2', 'another variant, stored too')
  t.equal((await b.get('/v2/store/a', {}, 'DELETE')).status, 204)
  t.equal(await client.exists(entryKey(standIn.url, ti.url, '/v2/store/a')), 0, 'gone from Redis')
  const after = await b.get('/v2/store/a', ASKS)
  t.equal(after.body, 'v3')
  t.match(after.headers['cache-status'], 'fwd=miss')
  t.equal((await b.metrics()).get(seriesKey('store_auth_proxy_cache_invalidations_total', { where: 'redis' })), 2, 'both variants')
  // a's own copy in memory went too, told through Redis.
  await eventually(t, 'a dropped its copy', async () =>
    (await a.metrics()).get(seriesKey('store_auth_proxy_cache_invalidations_total', { where: 'memory' })) === 1)
  const fromA = await a.get('/v2/store/a', ASKS)
  t.equal(fromA.body, 'v3', 'the answer b fetched after the write, from Redis')
  t.match(fromA.headers['cache-status'], '; hit')
  t.equal(ti.received.filter((r) => r.method === 'GET').length, 3)
})

t.test('case 9: s-maxage, must-revalidate and proxy-revalidate are never served stale: not on TI\'s error, a spent budget or a cool-down', async (t) => {
  for (const cc of ['s-maxage=60', 'max-age=60, must-revalidate', 'max-age=60, proxy-revalidate']) {
    await t.test(cc, async (t) => {
      const ti = await startTi(t)
      ti.answer(() => ({ status: 200, headers: { 'cache-control': cc }, body: 'good' }))
      const s = await cacheSidecar(t, ti, env('100/1h cache=1h stale=1d'))
      t.equal((await s.get('/v2/store/a')).body, 'good')
      t.match((await s.get('/v2/store/a')).headers['cache-status'], '; hit', 'stored, and fresh for its 60 s')
      await s.advance(61_000)
      ti.answer(() => ({ status: 503, body: 'down' }))
      t.equal((await s.get('/v2/store/a')).status, 503, 'TI\'s error, not the stale answer')
      ti.answer(() => ({ status: 429, headers: { 'retry-after': '600' }, body: 'slow down' }))
      t.equal((await s.get('/v2/store/a')).status, 429, 'TI\'s 429')
      const cooling = await s.get('/v2/store/a')
      t.equal(cooling.status, 429, 'the cool-down\'s refusal')
      t.notMatch(String(cooling.headers['cache-status']), 'stale')
      // A spent budget.
      const spent = await cacheSidecar(t, ti, env('1/1h cache=1h stale=1d'))
      ti.answer(() => ({ status: 200, headers: { 'cache-control': cc }, body: 'good' }))
      t.equal((await spent.get('/v2/store/a')).body, 'good')
      await spent.advance(61_000)
      const refused = await spent.get('/v2/store/a')
      t.equal(refused.status, 429, 'the budget\'s refusal')
      t.equal(refused.headers['cache-status'], undefined)
    })
  }
})

t.test('case 9: an invalid Expires is already expired; a list-valued Age counts its first value; max-age with proxy-revalidate is stored', async (t) => {
  const ti = await startTi(t)
  const answers: Record<string, Record<string, string>> = {
    '/v2/store/utc': { expires: 'Thu, 01 Jan 2099 00:00:00 UTC' },
    '/v2/store/comma': { expires: 'Thu 01 Jan 2099 00:00:00 GMT' },
    '/v2/store/dashes': { expires: 'Thu, 01-Jan-2099 00:00:00 GMT' },
    '/v2/store/hour': { expires: 'Thu, 01 Jan 2099 0:00:00 GMT' },
    '/v2/store/valid': { expires: 'Thu, 01 Jan 2099 00:00:00 GMT' },
    '/v2/store/age': { 'cache-control': 'max-age=10000', age: '7200, 0' },
    '/v2/store/revalidate': { 'cache-control': 'max-age=600, proxy-revalidate' }
  }
  ti.answer((req) => ({ status: 200, headers: answers[req.url] ?? {}, body: req.url }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  for (const path of ['/v2/store/utc', '/v2/store/comma', '/v2/store/dashes', '/v2/store/hour']) {
    t.equal((await s.get(path)).headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=expired', path)
    t.match((await s.get(path)).headers['cache-status'], 'fwd=miss', `${path}: asked again`)
  }
  t.match((await s.get('/v2/store/valid')).headers['cache-status'], '; stored; ttl=3600')
  t.match((await s.get('/v2/store/valid')).headers['cache-status'], '; hit')
  const aged = await s.get('/v2/store/age')
  t.equal(aged.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=2800')
  const agedHit = await s.get('/v2/store/age')
  t.equal(agedHit.headers.age, '7200', 'two hours old, as TI said')
  t.match(agedHit.headers['cache-status'], '; hit; ttl=2800')
  t.match((await s.get('/v2/store/revalidate')).headers['cache-status'], '; stored; ttl=600')
  t.match((await s.get('/v2/store/revalidate')).headers['cache-status'], '; hit; ttl=600')
  t.equal(ti.received.length, 11)
})
