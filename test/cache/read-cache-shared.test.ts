// The read cache beside a fleet's Redis that fails or talks back, without a Redis: writes that
// cannot reach Redis, invalidations told by other sidecars, and values of another layout
// logged once per key however many keys come and go.
import t from 'tap'
import { createReadCache } from '../../src/cache/read-cache.js'
import type { SharedCache } from '../../src/cache/redis-cache.js'
import { cacheKey } from '../../src/cache/policy.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import { parseMetrics, seriesKey } from '../helpers/metrics-scrape.js'

const U = 'https://store.example'

function setUp () {
  const c = fakeClock()
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  const watchers: { malformed?: (id: string, why: string) => void, invalidated?: (uri: string) => void } = {}
  const shared = {
    displayUrl: 'redis://redis:6379',
    onMalformed: (watcher: (id: string, why: string) => void) => { watchers.malformed = watcher },
    onInvalidated: (watcher: (uri: string) => void) => { watchers.invalidated = watcher },
    get: async () => { throw new Error('down') },
    filling: async () => { throw new Error('down') },
    set: async () => ({ outcome: 'too-large', heldBytes: -1, evictedBytes: 0 }),
    invalidate: async () => { throw new Error('connection refused') },
    describe: (err: unknown) => String((err as Error).message),
    up: () => false
  } as unknown as SharedCache
  const cache = createReadCache({ clock: c.clock, log: logs.log, metrics, maxBytes: 1 << 20, entryMaxBytes: 1 << 16, shared, fillMs: 1_000 })
  const store = (path: string): void => {
    const decision = { store: true, freshMs: 60_000, staleMs: 0, initialAgeMs: 0, vary: [] } as const
    cache.store(cacheKey(U, path, {}), 'r', decision, { statusCode: 200, headers: {}, body: Buffer.from(path) })
  }
  const samples = async () => parseMetrics(await metrics.registry.metrics())
  return { cache, logs, watchers, store, samples }
}

t.test('a write that cannot reach Redis still drops this sidecar\'s copies; the failure is logged and counted', async (t) => {
  const { cache, logs, store, samples } = setUp()
  store('/v2/a')
  cache.invalidate(U, 'PUT', '/v2/a', 200, {})
  t.equal((await cache.find(cacheKey(U, '/v2/a', {}), {})).entry, undefined)
  await new Promise((resolve) => setImmediate(resolve))
  t.match(logs.text(), 'read cache: an invalidation in redis failed')
  const m = await samples()
  t.ok((m.get(seriesKey('store_auth_proxy_cache_redis_errors_total', {})) ?? 0) >= 1)
  t.equal(m.get(seriesKey('store_auth_proxy_cache_invalidations_total', { where: 'memory' })), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_cache_redis_bytes', {})), 0, 'a store not sent to Redis leaves its gauge alone')
})

t.test('another sidecar\'s write, told through Redis, drops the copies here', async (t) => {
  const { cache, watchers, store, samples } = setUp()
  store('/v2/a')
  store('/v2/b')
  watchers.invalidated?.(cacheKey(U, '/v2/a', {}).uri)
  t.equal(cache.status().entries.map((e) => e.path).join(), '/v2/b')
  t.equal((await samples()).get(seriesKey('store_auth_proxy_cache_invalidations_total', { where: 'memory' })), 1)
})

t.test('a value of another layout: counted every time, logged once per key, the memory of logged keys bounded', async (t) => {
  const { logs, watchers, samples } = setUp()
  const logged = (): number => logs.entries().filter((e) => e.reason === 'another version').length
  watchers.malformed?.('k1', 'another version')
  watchers.malformed?.('k1', 'another version')
  t.equal(logged(), 1)
  for (let i = 0; i < 1_000; i++) watchers.malformed?.(`m${i}`, 'another version')
  t.equal(logged(), 1_001)
  // The first thousand remembered were forgotten to make room: k1 is logged again.
  watchers.malformed?.('k1', 'another version')
  t.equal(logged(), 1_002)
  t.equal((await samples()).get(seriesKey('store_auth_proxy_cache_redis_malformed_total', {})), 1_003)
})
