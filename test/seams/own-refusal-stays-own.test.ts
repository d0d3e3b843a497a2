// A sidecar's refusal for want of its own budget check is not the fleet's answer (an outside
// review of 79ca1ee). Sidecar A's Redis stalls while A misses the catalog: its claim times out
// here (held as the fetch's own, it runs when the stall heals) and its budget cannot be
// checked, so A's caller gets 429. That refusal counted as fleet-wide, so A's release put it in
// the claim's place: B, connected all along with the 1/4h untouched, answered its caller 429.
// Now A's refusal stays A's: B fetches and answers 200, one call at TI. Whatever the order of
// A's release and B's claim, B's answer is 200; the pause lets the release land first, where
// the defect showed.
import t from 'tap'
import { cacheKey } from '../../src/cache/policy.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { startFaultProxy } from '../helpers/tcp-fault-proxy.js'
import { DAY, cacheSidecar, startTi } from '../cache/fixture.js'

const ASKS = { accept: 'application/json', 'accept-language': 'en', 'accept-encoding': 'identity' }
const PATH = '/v2/store/products/catalog'

t.test('a stalled sidecar\'s own refusal never becomes the fleet\'s answer', async (t) => {
  const redis = await startRedis(t)
  const fault = await startFaultProxy(t, redis.port)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const env = { RATE_LIMITS: 'GET /v2/store/products/catalog 1/4h cache=4h', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '200', UPSTREAM_QUEUE_TIMEOUT_MS: '500', UPSTREAM_TIMEOUT_MS: '5000' }
  const a = await cacheSidecar(t, ti, env, { redisUrl: `redis://127.0.0.1:${fault.port}`, authUrl: standIn.url, systemClock: true })
  const b = await cacheSidecar(t, ti, env, { redisUrl: redis.url, authUrl: standIn.url, systemClock: true })
  for (const s of [a, b]) await eventually(t, 'on redis', async () => ((await s.status()).rateLimits as { backend: string }).backend === 'redis')
  const claimKey = `${redisKeyPrefix(standIn.url, CLIENT_ID)}cache-fill:${cacheKey(ti.url, PATH, ASKS).id}`

  fault.stall()
  const gotA = await a.get(PATH, ASKS)
  t.comment(`A while stalled: ${gotA.status} ${gotA.body.slice(0, 160)}`)
  await fault.heal()
  await new Promise((resolve) => setTimeout(resolve, 100))
  t.comment(`claim key now: ${(await redis.command('GET', claimKey)).slice(0, 120)}`)
  const gotB = await b.get(PATH, ASKS)
  t.comment(`B: ${gotB.status} retry-after=${String(gotB.headers['retry-after'])} ${gotB.body.slice(0, 160)}`)
  t.equal(ti.received.length, gotB.status === 200 ? 1 : 0, 'TI asked only by a fetch that answered')
  t.equal(gotB.status, 200, 'B\'s caller gets the catalog: the fleet\'s budget is untouched')
})
