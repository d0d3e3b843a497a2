// The guard's RATE_LIMIT settings as tests give them: `rules` parsed (a problem throws), the
// rest at short test values unless `options` says otherwise.
import { parseRules } from '../../src/config/rate-limit-rules.js'
import type { RateLimitConfig } from '../../src/config/rate-limits.js'

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
