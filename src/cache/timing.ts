// How long a caller of a rule with cache= can wait before the first byte of its answer, against
// IDLE_TIMEOUT_MS (the proxy listener closes a connection silent for that long, and its caller
// gets no status line). Configuration refuses an IDLE_TIMEOUT_MS at or below one fetch (token,
// budget, queue, TI: src/config/load.ts). With Redis, a caller may wait longer: for
// another sidecar's fetch of its key first, and then, if that fetch ended with nothing it can
// use (the sidecar died, or TI's answer was not storable), for its own. That takes two faults
// or an unstorable answer, so it is a warning, with the figure to act on, not a refusal.
import type { Config } from '../config/load.js'

/** redis-cache.ts's CACHE_REDIS_TIMEOUT_MS (a test keeps them equal): importing it would load ioredis for every start. */
export const CACHE_REDIS_MIN_TIMEOUT_MS = 1_000

export interface CachedWait {
  /** RATE_LIMIT_MAX_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS: the longest another sidecar's fetch is waited for. */
  fleetWaitMs: number
  /** TOKEN_WAIT_MS + the same: the longest this sidecar's own fetch takes. */
  ownFetchMs: number
  /** Redis round trips on the way: a lookup, a claim and the last look at another's fetch, each bounded by the cache's timeout. */
  redisMs: number
}

/** The parts of the longest wait of a caller of a cached rule with the fleet's Redis. */
export function cachedWait (config: {
  token: Pick<Config['token'], 'waitMs'>
  upstream: Pick<Config['upstream'], 'queueTimeoutMs' | 'timeoutMs'>
  rateLimits: Pick<Config['rateLimits'], 'maxWaitMs' | 'redisTimeoutMs'>
}): CachedWait {
  const fleetWaitMs = config.rateLimits.maxWaitMs + config.upstream.queueTimeoutMs + config.upstream.timeoutMs
  return {
    fleetWaitMs,
    ownFetchMs: config.token.waitMs + fleetWaitMs,
    redisMs: 3 * Math.max(config.rateLimits.redisTimeoutMs, CACHE_REDIS_MIN_TIMEOUT_MS)
  }
}

/** A warning when a caller of a cached rule can outwait IDLE_TIMEOUT_MS and be cut off with no status line. */
export function cachedWaitWarnings (config: Config): string[] {
  const caching = config.rateLimits.rules.some((rule) => rule.cache !== undefined)
  if (!caching || config.rateLimits.redisUrl === undefined) return []
  const { fleetWaitMs, ownFetchMs, redisMs } = cachedWait(config)
  const longest = fleetWaitMs + ownFetchMs + redisMs
  if (config.listener.idleTimeoutMs > longest) return []
  return [
    `IDLE_TIMEOUT_MS (${config.listener.idleTimeoutMs} ms) is not above the longest a caller of a cache= rule can wait with Redis: ` +
    `${longest} ms (another sidecar's fetch of its key, RATE_LIMIT_MAX_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS = ${fleetWaitMs} ms; ` +
    `then its own when that one ended with nothing it can use, TOKEN_WAIT_MS + the same = ${ownFetchMs} ms; and ${redisMs} ms of Redis). ` +
    `Such a caller would be cut off with no status line: set IDLE_TIMEOUT_MS above ${longest}, or lower UPSTREAM_TIMEOUT_MS`
  ]
}
