// The guard's RATE_LIMIT settings as tests give them: `rules` parsed (a problem throws), the
// rest at short test values unless `options` says otherwise; and a guard built on them on a
// fake clock, with its metrics and cool-down gauge.
import type { Clock } from '../../src/clock.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import type { RateLimitConfig } from '../../src/config/rate-limits.js'
import { createMetrics } from '../../src/metrics.js'
import { createQuotaGuard, type GuardOptions } from '../../src/quota/guard.js'
import { fakeClock } from '../helpers/fake-clock.js'

export function guardConfig (rules: string, options: Partial<RateLimitConfig> = {}): RateLimitConfig {
  const parsed = parseRules(rules, 'RATE_LIMITS')
  if (parsed.problems.length > 0) throw new Error(parsed.problems.join('\n'))
  return {
    rules: parsed.rules,
    rulesSource: rules === '' ? undefined : 'RATE_LIMITS',
    maxWaitMs: 2_000,
    cooldownMs: 1_000,
    cooldownMaxMs: 60_000,
    redisUrl: undefined,
    redisUrlSource: undefined,
    redisUrlFile: undefined,
    redisTimeoutMs: 500,
    fleetSize: 0,
    aloneMaxMs: 3_600_000,
    headers: true,
    ...options
  }
}

/** The fake clock's wall time at its start: a cool-down's gauge reads its end from here. */
export const WALL_START = 1_700_000_000_000

export interface GuardOnFakeClockOptions extends Pick<GuardOptions, 'log' | 'fleet'> {
  /** The fake clock, when the test builds something else on it first (a stand-in fleet store). */
  c?: ReturnType<typeof fakeClock>
  /** What the guard sees of the fake clock (a wrapper counting its timers, say). */
  clock?: (clock: Clock) => Clock
}

/** A guard on a fake clock from WALL_START; `gauge(scope)`: its cool-down gauge (unix seconds of the end, 0 for none; undefined: no series). */
export function guardOnFakeClock (config: RateLimitConfig, { c = fakeClock(WALL_START), clock = (clock) => clock, ...options }: GuardOnFakeClockOptions) {
  const metrics = createMetrics({ defaultMetrics: false })
  const guard = createQuotaGuard({ config, clock: clock(c.clock), metrics, ...options })
  const gauge = async (scope: string): Promise<number | undefined> =>
    (await metrics.rateLimitCooldownUntil.get()).values.find((v) => v.labels.rule === scope)?.value
  return { c, metrics, guard, gauge }
}
