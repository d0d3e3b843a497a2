import { Counter, Gauge, METRIC_PREFIX, type Registry } from './prom.js'

/** The read cache (src/cache/): answers by how they were served, stores, evictions, bytes held, here and in Redis. */
export function cacheMetrics (registry: Registry) {
  const counter = (name: string, help: string, labelNames: string[]) => new Counter({ name: `${METRIC_PREFIX}${name}`, help, labelNames, registers: [registry] })
  let held = (): number => 0
  return {
    cacheRequests: counter('cache_requests_total',
      'Requests of rules with cache=, by how they were answered: hit (fresh), coalesced (another request\'s fetch), stale (TI could not be asked), miss (fetched or refused).',
      ['rule', 'result']),
    cacheStores: counter('cache_stores_total', 'Answers of TI stored by the read cache.', ['rule']),
    cacheNotStored: counter('cache_not_stored_total', 'Answers of TI to cached rules that were not stored, by reason (status, no-store, private, too-large, ...).', ['rule', 'reason']),
    cacheEvictions: counter('cache_evictions_total', 'Stored answers evicted to keep the cache within CACHE_MAX_BYTES.', ['rule']),
    cacheRedisErrors: counter('cache_redis_errors_total', 'Read-cache lookups or stores in Redis that failed (the sidecar used its own copies).', []),
    cacheRedisMalformed: counter('cache_redis_malformed_total',
      'Values in Redis under a read-cache key that were not a complete entry of this version (another version\'s, or damaged): each was a miss.', []),
    cacheRedisEvictedBytes: counter('cache_redis_evicted_bytes_total',
      'Bytes of the fleet\'s stored answers the read cache evicted from Redis to stay within CACHE_REDIS_MAX_BYTES (the cache\'s own entries only).', []),
    cacheRedisBytes: new Gauge({
      name: `${METRIC_PREFIX}cache_redis_bytes`,
      help: 'Bytes of the fleet\'s stored answers in Redis (at most CACHE_REDIS_MAX_BYTES), as this sidecar\'s last store or invalidation found them.',
      registers: [registry]
    }),
    cacheInvalidations: counter('cache_invalidations_total',
      'Stored answers dropped because a PUT, POST, DELETE or other unsafe request to their URI succeeded (RFC 9111 §4.4), by where they were: this sidecar\'s memory, or Redis.', ['where']),
    cacheBytes: new Gauge({
      name: `${METRIC_PREFIX}cache_bytes`,
      help: 'Bytes of stored answers this sidecar holds in memory (at most CACHE_MAX_BYTES).',
      registers: [registry],
      collect () { this.set(held()) }
    }),
    /** Where cache_bytes is read from. */
    measureCache (fn: () => number): void { held = fn }
  }
}
