// Review of the read cache across a fleet: a fetch marker left behind, Redis slow, down, and
// what a stale entry costs. Regression tests failed on the code reviewed (each defect
// fixed since); PROBE tests passed on it.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { request } from 'undici'
import { cacheKey } from '../../src/cache/policy.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { DAY, cacheSidecar, catalogBody, startTi } from '../cache/fixture.js'

const ASKS = { accept: 'application/json', 'accept-language': 'en', 'accept-encoding': 'identity' }

async function redisClient (t: Test, url: string): Promise<Redis> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return client
}

async function infoField (client: Redis, section: string, pattern: RegExp): Promise<number> {
  const match = pattern.exec(await client.info(section))
  return Number(match?.[1] ?? 0)
}

/** The marker a sidecar that fetches `path` sets in Redis for the fleet. */
function fillMarker (authUrl: string, upstreamUrl: string, path: string): string {
  return `${redisKeyPrefix(authUrl, CLIENT_ID)}cache-fill:${cacheKey(upstreamUrl, path, ASKS).id}`
}

t.test('PROBE: a fetch marker left by a sidecar that died: a miss waits for it at most its own fetch time (fillMs), then fetches', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  // fillMs = RATE_LIMIT_MAX_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS = 1.2 s here (36 s by default).
  const s = await cacheSidecar(t, ti, {
    RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0', UPSTREAM_QUEUE_TIMEOUT_MS: '200', UPSTREAM_TIMEOUT_MS: '1000'
  }, { redisUrl: redis.url, authUrl: standIn.url, systemClock: true })
  // Left behind for ten minutes (longer than this sidecar's fillMs: another one's, configured otherwise).
  t.equal(await redis.command('SET', fillMarker(standIn.url, ti.url, '/v2/store/a'), '1', 'PX', '600000'), '+OK')
  const started = performance.now()
  const answer = await s.get('/v2/store/a', ASKS)
  const waited = performance.now() - started
  t.equal(answer.status, 200)
  t.equal(answer.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600')
  t.ok(waited >= 1_100 && waited < 3_000, `waited ${Math.round(waited)} ms for the dead sidecar's fetch (fillMs 1200)`)
  t.equal(ti.received.length, 1)
})

t.test('Regression: a stale entry is downloaded whole from Redis on every request that it answers', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const body = catalogBody(256 * 1024)
  ti.answer(() => ({ status: 200, body }))
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: 'GET /v2/store/** 1/1h cache=1s stale=1h', RATE_LIMIT_MAX_WAIT_MS: '0' },
    { redisUrl: redis.url, systemClock: true })
  const client = await redisClient(t, redis.url)
  t.match((await s.get('/v2/store/a')).headers['cache-status'], '; stored')
  await sleep(1_200)
  const before = await infoField(client, 'stats', /total_net_output_bytes:(\d+)/)
  for (let i = 0; i < 10; i++) {
    const stale = await s.get('/v2/store/a')
    t.equal(stale.body, body)
    t.match(stale.headers['cache-status'], 'detail=stale-budget')
  }
  const sent = await infoField(client, 'stats', /total_net_output_bytes:(\d+)/) - before
  t.ok(sent < 2 * body.length, `Redis sent ${sent} bytes for 10 stale answers of ${body.length} bytes held in memory already`)
  t.equal(ti.received.length, 1)
})

t.test('Regression: a caller that leaves while a fleet-wait lookup is in Redis leaves its poll running (every 50 ms, for up to fillMs)', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' },
    { redisUrl: redis.url, authUrl: standIn.url, systemClock: true })
  const client = await redisClient(t, redis.url)
  const gets = async (): Promise<number> => await infoField(client, 'commandstats', /cmdstat_get:calls=(\d+)/)
  // What an idle sidecar sends: the baseline.
  const idle0 = await gets()
  await sleep(500)
  const idle = await gets() - idle0
  // Another sidecar fetches this for the next 5 s (longer than the test looks).
  await redis.command('SET', fillMarker(standIn.url, ti.url, '/v2/store/a'), '1', 'PX', '5000')
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/a', { headers: ASKS, signal: leaver.signal }).then(() => 'answered', () => 'left')
  await sleep(200)
  // Redis busy for 400 ms: the waiter's next lookup is in Redis when its caller leaves.
  const awake = redis.sleep(400)
  await sleep(150)
  leaver.abort()
  t.equal(await left, 'left')
  await awake
  await sleep(100)
  const after0 = await gets()
  await sleep(500)
  const after = await gets() - after0
  t.ok(after <= idle + 2, `GETs in 500 ms after the caller left: ${after} (idle: ${idle})`)
  t.equal(ti.received.length, 0)
})

t.test('Regression (operability): with Redis down, cache lookups fail silently: cache_redis_errors_total stays 0', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' },
    { redisUrl: redis.url, systemClock: true })
  await redis.stop()
  for (const p of ['/v2/store/a', '/v2/store/b', '/v2/store/c']) await s.get(p)
  const errors = (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_cache_redis_errors_total', {})) ?? 0
  t.ok(errors > 0, `cache_redis_errors_total is ${errors} after 3 lookups with Redis down`)
  await redis.start()
})
