// IDLE_TIMEOUT_MS against what a caller of a cache= rule can really wait (where the features meet): one fetch is
// refused by the configuration already; with Redis, another sidecar's fetch and then its own can
// outlast it, and the sidecar says so at start (and check-config) with the figure to set.
import t from 'tap'
import { cachedWait, cachedWaitWarnings, CACHE_REDIS_MIN_TIMEOUT_MS } from '../../src/cache/timing.js'
import { CACHE_REDIS_TIMEOUT_MS } from '../../src/cache/redis-cache.js'
import { loadConfig } from '../../src/config/load.js'
import { CLIENT_ID, CLIENT_SECRET } from '../helpers/build.js'

const BASE = { CLIENT_ID, CLIENT_SECRET, AUTH_URL: 'http://127.0.0.1:1', UPSTREAM_URL: 'http://127.0.0.1:2' }
const REDIS = 'redis://127.0.0.1:6379'
const CACHED = 'GET /v2/store/products/catalog 1/4h cache=4h stale=1d'

t.test('the parts of the longest wait follow the settings', async (t) => {
  const config = loadConfig({ ...BASE, RATE_LIMITS: CACHED, RATE_LIMIT_REDIS_URL: REDIS, RATE_LIMIT_REDIS_TIMEOUT_MS: '1500' })
  t.same(cachedWait(config), { fleetWaitMs: 1_000 + 5_000 + 30_000, ownFetchMs: 3_000 + 36_000, redisMs: 4_500 })
  t.equal(CACHE_REDIS_MIN_TIMEOUT_MS, CACHE_REDIS_TIMEOUT_MS, 'the same floor as the cache\'s Redis timeout')
})

const cases: Array<[string, Record<string, string>, boolean]> = [
  ['the defaults (120 s against 78 s)', { RATE_LIMITS: CACHED, RATE_LIMIT_REDIS_URL: REDIS }, false],
  ['a short idle timeout with a cached rule and Redis', { RATE_LIMITS: CACHED, RATE_LIMIT_REDIS_URL: REDIS, IDLE_TIMEOUT_MS: '60000' }, true],
  ['the boundary: equal is not above', { RATE_LIMITS: CACHED, RATE_LIMIT_REDIS_URL: REDIS, IDLE_TIMEOUT_MS: '78000' }, true],
  ['one above it', { RATE_LIMITS: CACHED, RATE_LIMIT_REDIS_URL: REDIS, IDLE_TIMEOUT_MS: '78001' }, false],
  ['no Redis: one fetch at most, which the configuration checks', { RATE_LIMITS: CACHED, IDLE_TIMEOUT_MS: '60000' }, false],
  ['no cache= rule', { RATE_LIMITS: 'GET /v2/store/** 5/1s', RATE_LIMIT_REDIS_URL: REDIS, IDLE_TIMEOUT_MS: '60000' }, false]
]
for (const [name, env, warned] of cases) {
  t.test(`IDLE_TIMEOUT_MS warning: ${name}`, async (t) => {
    const warnings = cachedWaitWarnings(loadConfig({ ...BASE, ...env }))
    t.equal(warnings.length, warned ? 1 : 0)
    if (warned) {
      t.match(warnings[0], /^IDLE_TIMEOUT_MS \(\d+ ms\) is not above the longest a caller of a cache= rule can wait with Redis: 78000 ms/)
      t.match(warnings[0], 'set IDLE_TIMEOUT_MS above 78000, or lower UPSTREAM_TIMEOUT_MS', 'says what to do')
    }
  })
}
