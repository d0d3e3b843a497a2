import type * as PromClient from 'prom-client'
import { Counter, Gauge, METRIC_PREFIX, type Registry } from './prom.js'

/** The quota guard's metrics, every one named rate_limit*. */
export function rateLimitMetrics (registry: Registry, rateLimitRedis: boolean) {
  // The quota guard (src/quota/): local refusals and delays, the gateway's own rate-limit
  // answers, cool-downs, and where budgets live.
  const rateLimited = new Counter({
    name: `${METRIC_PREFIX}rate_limited_total`,
    help: 'Requests the quota guard refused (local 429) or delayed, by rule (upstream for none), reason (budget, cooldown, degraded: Redis cannot be asked and this sidecar\'s share is spent, alone_ended: cut off from Redis longer than RATE_LIMIT_ALONE_MAX_MS, unrecorded: STATE_DIR cannot record a send decided alone) and action (refused, delayed).',
    labelNames: ['rule', 'reason', 'action'] as const,
    registers: [registry]
  })
  const rateLimitUpstreamAnswers = new Counter({
    name: `${METRIC_PREFIX}rate_limit_upstream_answers_total`,
    help: 'Rate-limit answers from the gateway (429, or 500 with a policies.ratelimit.* error code), by rule (upstream for none).',
    labelNames: ['rule'] as const,
    registers: [registry]
  })
  const rateLimitCooldownUntil = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_cooldown_until_seconds`,
    help: 'Unix time at which the cool-down of a rule (upstream for none) ends; 0 when none.',
    labelNames: ['rule'] as const,
    registers: [registry]
  })
  const rateLimitBackend = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_backend`,
    help: 'Where budgets and cool-downs live: 1 for the backend in use (memory, redis), 0 for the other.',
    labelNames: ['backend'] as const,
    registers: [registry]
  })
  rateLimitBackend.set({ backend: 'memory' }, 1)
  rateLimitBackend.set({ backend: 'redis' }, 0)
  const rateLimitRedisUp = rateLimitRedis
    ? new Gauge({
      name: `${METRIC_PREFIX}rate_limit_redis_up`,
      help: '1 when the rate-limit Redis answers and budgets are shared, 0 when they are not (then each sidecar spends only its share).',
      registers: [registry]
    })
    : undefined
  rateLimitRedisUp?.set(0)
  const rateLimitRedisFallbacks = new Counter({
    name: `${METRIC_PREFIX}rate_limit_redis_fallbacks_total`,
    help: 'Switches of the quota guard from shared budgets in Redis to degraded mode (Redis unreachable, too slow or refusing).',
    registers: [registry]
  })
  // Degraded mode and the fleet (only with RATE_LIMIT_REDIS_URL): docs/quota-guard.md.
  const fleetGauge = (name: string, help: string): PromClient.Gauge | undefined => rateLimitRedis
    ? new Gauge({ name: `${METRIC_PREFIX}${name}`, help, registers: [registry] })
    : undefined
  const rateLimitDegraded = fleetGauge('rate_limit_degraded',
    '1 while budgets cannot be shared through Redis and this sidecar spends only its share (limit / fleet size, or the largest declared), 0 when shared.')
  rateLimitDegraded?.set(1)
  const rateLimitFleetSize = fleetGauge('rate_limit_fleet_size',
    'The fleet size shares are computed with: RATE_LIMIT_FLEET_SIZE, or the sidecars present in Redis if more; 0: unknown.')
  const rateLimitFleetPresent = fleetGauge('rate_limit_fleet_present', 'Sidecars on this credential present in Redis at the last contact.')
  const rateLimitRedisEvicting = fleetGauge('rate_limit_redis_evicting',
    '1 when the rate-limit Redis may evict keys (maxmemory set, a policy other than noeviction), 0 when not, -1 when it does not tell.')
  const rateLimitFleetDeclared = fleetGauge('rate_limit_fleet_declared',
    'RATE_LIMIT_FLEET_SIZE (0: unset); fewer than rate_limit_fleet_present breaks the guarantee while cut off from Redis.')
  const rateLimitRedisDataLost = rateLimitRedis
    ? new Counter({
      name: `${METRIC_PREFIX}rate_limit_redis_data_lost_total`,
      help: 'Times Redis was found to have lost the fleet\'s tally (restarted empty): every budget is refused for one window of its limits.',
      registers: [registry]
    })
    : undefined

  return {
    rateLimited,
    rateLimitUpstreamAnswers,
    rateLimitCooldownUntil,
    rateLimitBackend,
    rateLimitRedisUp,
    rateLimitRedisFallbacks,
    rateLimitDegraded,
    rateLimitFleetSize,
    rateLimitFleetPresent,
    rateLimitFleetDeclared,
    rateLimitRedisEvicting,
    rateLimitRedisDataLost
  }
}

/**
 * What each limit of each rule may still send, read at each scrape (src/quota/rate-limit-fields.ts):
 * the fleet's remaining while Redis answers, else this sidecar's share's; and each limit's quota.
 */
export function budgetMetrics (registry: Registry) {
  let read: () => Promise<void> = async () => {}
  const rateLimitRemaining = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_remaining`,
    help: 'What a limit of a rule may still send now, as RateLimit tells callers: the fleet\'s remaining while Redis answers, else this sidecar\'s share\'s; 0 while cooling down.',
    labelNames: ['rule', 'limit'] as const,
    registers: [registry],
    async collect () { await read() }
  })
  const rateLimitQuota = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_quota`,
    help: 'The quota of a limit of a rule (N of N/WINDOW), for the share of a budget spent.',
    labelNames: ['rule', 'limit'] as const,
    registers: [registry]
  })
  return {
    rateLimitRemaining,
    rateLimitQuota,
    /** What rate_limit_remaining is read from at each scrape. */
    readBudgets (fn: () => Promise<void>): void { read = fn }
  }
}
