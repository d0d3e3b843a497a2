// Whether the budgets' Redis may evict keys: with `maxmemory` set and any policy but
// `noeviction`, memory pressure (the read cache's entries, another app's keys) evicts keys. The
// budgets' tally has no TTL, so volatile-* policies spare it, but not an order's idempotency
// key or a cool-down; allkeys-* may take the tally too, and the fleet would then under-count.
// Read at each connection
// with CONFIG GET, which an ACL or a managed Redis may refuse: then the policy is unknown,
// and said so. Reported, never fatal: docs/quota-guard.md lists the options.
import type { Logger } from 'pino'
import type { Redis } from 'ioredis'
import type { Metrics } from '../metrics.js'

export interface MemoryPolicy {
  /** maxmemory-policy, or undefined when CONFIG GET was refused. */
  policy: string | undefined
  /** maxmemory in bytes (0: no limit, nothing is ever evicted), undefined when refused. */
  maxBytes: number | undefined
  /** true: keys may be evicted; false: not; undefined: unknown. */
  evicting: boolean | undefined
  /** What eviction may drop, for the log and /readyz, when `evicting`. */
  atRisk?: string
}

/** What an evicting policy may drop: allkeys-* any key; volatile-* those with a TTL (not the budgets' tally). */
const atRisk = (policy: string | undefined): string => policy?.startsWith('allkeys-') === true
  ? 'budgets may be under-counted, and an order\'s idempotency key or a cool-down forgotten'
  : 'an order\'s idempotency key or a cool-down may be forgotten (budgets are safe: their tally has no TTL)'

/** CONFIG GET maxmemory and maxmemory-policy; unknown when refused (NOPERM, a renamed command). */
export async function readMemoryPolicy (client: Pick<Redis, 'config'>): Promise<MemoryPolicy> {
  try {
    const [, maxmemory] = await client.config('GET', 'maxmemory') as string[]
    const [, policy] = await client.config('GET', 'maxmemory-policy') as string[]
    const maxBytes = Number(maxmemory)
    const evicting = policy === undefined ? undefined : maxBytes > 0 && policy !== 'noeviction'
    return { policy, maxBytes, evicting, ...(evicting === true ? { atRisk: atRisk(policy) } : {}) }
  } catch {
    return { policy: undefined, maxBytes: undefined, evicting: undefined }
  }
}

/** Says an evicting (or unknown) policy once per change in the log, and in the metric; /readyz and /status read `current`. */
export function createMemoryPolicyReport (log: Logger, metrics: Metrics, displayUrl: string) {
  let current: MemoryPolicy | undefined
  return {
    note (next: MemoryPolicy | undefined): void {
      if (next === undefined) return
      const changed = current === undefined || current.policy !== next.policy || current.evicting !== next.evicting
      current = next
      metrics.rateLimitRedisEvicting?.set(next.evicting === undefined ? -1 : next.evicting ? 1 : 0)
      if (!changed) return
      if (next.evicting === true) {
        log.warn({ redis: displayUrl, maxmemoryPolicy: next.policy, maxmemory: next.maxBytes }, `rate-limit redis may evict keys under memory pressure: ${String(next.atRisk)}; use noeviction, or a redis (or database) of its own for the cache`)
      } else if (next.evicting === undefined) {
        log.info({ redis: displayUrl }, 'rate-limit redis does not tell its maxmemory-policy (CONFIG GET refused): make sure it is noeviction')
      }
    },
    current: (): MemoryPolicy | undefined => current
  }
}
