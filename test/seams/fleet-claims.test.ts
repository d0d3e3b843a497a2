// The fleet's claims in a real Redis (where the features meet, cases 1 and 6): the Lua scripts as sidecars meet
// them — a claim left by a sidecar that died, a failure left in a claim's place, a refresh of a
// stale entry that fails for the whole fleet.
import t, { type Test } from 'tap'
import { encodeFailure } from '../../src/cache/fleet-fetch.js'
import { cacheKey } from '../../src/cache/policy.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'
import { DAY, cacheSidecar, startTi, type CacheSidecar, type Ti } from '../cache/fixture.js'

const ASKS = { accept: 'application/json', 'accept-language': 'en', 'accept-encoding': 'identity' }
const PATH = '/v2/store/a'

async function fleet (t: Test, n: number, rules: string): Promise<{ redis: FaultyRedis, ti: Ti, sidecars: CacheSidecar[], claimKey: string }> {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const env = { RATE_LIMITS: rules, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '1000', UPSTREAM_QUEUE_TIMEOUT_MS: '500', UPSTREAM_TIMEOUT_MS: '5000' }
  const sidecars = await Promise.all(Array.from({ length: n }, async () =>
    await cacheSidecar(t, ti, env, { redisUrl: redis.url, authUrl: standIn.url, systemClock: true })))
  for (const s of sidecars) {
    await eventually(t, 'the sidecar on redis', async () => ((await s.status()).rateLimits as { backend: string }).backend === 'redis')
  }
  const claimKey = `${redisKeyPrefix(standIn.url, CLIENT_ID)}cache-fill:${cacheKey(ti.url, PATH, ASKS).id}`
  return { redis, ti, sidecars, claimKey }
}

t.test('a claim left by a sidecar that died lapses with its lease: the miss waits for that, then fetches once', async (t) => {
  const { redis, ti, sidecars: [s], claimKey } = await fleet(t, 1, 'GET /v2/store/** 1/1h cache=1h')
  t.equal(await redis.command('SET', claimKey, 'fetch:1:1:1', 'PX', '400'), '+OK')
  const started = performance.now()
  const got = await s!.get(PATH, ASKS)
  t.equal(got.status, 200)
  t.equal(got.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600')
  t.ok(performance.now() - started >= 300, 'it waited for the lease to lapse')
  t.equal(ti.received.length, 1)
})

t.test('a failure another sidecar\'s fetch left: a caller arriving meanwhile gets it, TI is not asked, no budget spent', async (t) => {
  const { redis, ti, sidecars: [s], claimKey } = await fleet(t, 1, 'GET /v2/store/** 1/1h cache=1h')
  const failure = encodeFailure({ answer: { statusCode: 503, headers: { 'content-type': 'text/plain' }, body: Buffer.from('store down') } })
  t.equal(await redis.command('SET', claimKey, failure, 'PX', '5000'), '+OK')
  const got = await s!.get(PATH, ASKS)
  t.equal(`${got.status} ${got.body}`, '503 store down')
  t.equal(ti.received.length, 0)
  await redis.command('DEL', claimKey)
  t.equal((await s!.get(PATH, ASKS)).status, 200, 'its budget point is still there')
})

t.test('case 6: the fleet\'s refresh of a stale entry fails: the stale answer stands in on every sidecar, after one call to TI', async (t) => {
  const { ti, sidecars } = await fleet(t, 3, 'GET /v2/store/** 5/1h cache=2s stale=1h')
  ti.answer(() => ({ status: 200, body: 'first' }))
  for (const s of sidecars) t.equal((await s.get(PATH, ASKS)).body, 'first')
  for (const s of sidecars) {
    await eventually(t, 'its copy stale', async () =>
      ((await s.status()).cache as { entries: Array<{ state: string }> }).entries.every((e) => e.state === 'stale'))
  }
  ti.answer(() => ({ status: 500, body: 'broken' }))
  ti.hold()
  const answers = Promise.all(Array.from({ length: 9 }, async (_, i) => await sidecars[i % 3]!.get(PATH, ASKS)))
  await eventually(t, 'the fleet\'s one refresh held at TI', () => ti.waiting() === 1)
  ti.release()
  const got = await answers
  t.same(got.map((a) => `${a.status} ${a.body}`), got.map(() => '200 first'))
  t.ok(got.every((a) => String(a.headers['cache-status']).includes('detail=stale-error')), 'each says the refresh failed')
  t.equal(ti.received.length, 2, 'one refresh for the fleet')
})
