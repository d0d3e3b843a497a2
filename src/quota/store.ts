// Where budgets and cool-downs live: the contract both backends keep, and the in-memory
// one (per sidecar; the default, and the fallback while Redis is unreachable). The
// Redis one (redis-backend.ts) runs the same algorithm as one Lua script.
import type { Clock } from '../clock.js'
import type { Limit } from './rules.js'

/** What a take found: the request may go (one point taken from every limit), or why not and for how long. */
export type Take =
  | { readonly kind: 'ok' }
  /** The scope is cooling down for `ms` more; nothing was taken. */
  | { readonly kind: 'cooldown', readonly ms: number }
  /** A limit is spent; all of them have room again in `ms`; nothing was taken. */
  | { readonly kind: 'budget', readonly ms: number }

export interface CooldownRequest {
  /** The gateway's Retry-After, in ms, when usable. */
  retryAfterMs: number | undefined
  /** First cool-down without a usable Retry-After (RATE_LIMIT_COOLDOWN_MS). */
  baseMs: number
  /** Cap on both (RATE_LIMIT_COOLDOWN_MAX_MS). */
  maxMs: number
}

export interface Store {
  /**
   * Atomically: if the scope is not cooling down and every limit has room, takes one point
   * from each; otherwise takes nothing (a refused or abandoned request spends nothing).
   */
  take: (scope: string, limits: readonly Limit[]) => Take | Promise<Take>
  /** Starts (or lengthens) the scope's cool-down; resolves to the ms until it ends. */
  coolDown: (scope: string, request: CooldownRequest) => number | Promise<number>
}

export const OK: Take = Object.freeze({ kind: 'ok' })

/**
 * The length of a new cool-down, shared by both backends. With a usable Retry-After, that
 * (capped). Without: RATE_LIMIT_COOLDOWN_MS, doubled (capped) when this rate-limit answer
 * comes within the previous cool-down's own length after it ended.
 * `activeMs`: what is left of a cool-down under way (0 for none); `previousMs`: the length of
 * the last one if it ended less than its own length ago (else undefined).
 * Returns the new length, or undefined when the one under way already covers it.
 */
export function nextCooldownMs (request: CooldownRequest, activeMs: number, previousMs: number | undefined): number | undefined {
  if (request.retryAfterMs !== undefined) {
    const ms = Math.min(request.retryAfterMs, request.maxMs)
    return ms > activeMs ? ms : undefined
  }
  // A rate-limit answer to a request sent before the cool-down began: the cool-down stands.
  if (activeMs > 0) return undefined
  return previousMs === undefined ? Math.min(request.baseMs, request.maxMs) : Math.min(previousMs * 2, request.maxMs)
}

interface Counter { used: number, endsAt: number }
interface Cooldown { endsAt: number, lengthMs: number }

/**
 * Fixed windows per limit, each starting at the first send it counts (as Redis keys with
 * a PEXPIRE do): `1/4h` allows one send, then none until 4 h after it. On the injected
 * monotonic clock, so long windows are tested by moving a fake clock.
 */
export interface MemoryStore extends Store {
  take: (scope: string, limits: readonly Limit[]) => Take
  coolDown: (scope: string, request: CooldownRequest) => number
  /** Monotonic ms at which the scope's cool-down ends, if one is under way. */
  cooldownEnd: (scope: string) => number | undefined
}

export function createMemoryStore (clock: Clock): MemoryStore {
  const counters = new Map<string, Counter>()
  const cooldowns = new Map<string, Cooldown>()

  const counterKey = (scope: string, limit: Limit): string => `${scope}\n${limit.text}`

  function take (scope: string, limits: readonly Limit[]): Take {
    const now = clock.now()
    const cooldown = cooldowns.get(scope)
    if (cooldown !== undefined && cooldown.endsAt > now) return { kind: 'cooldown', ms: cooldown.endsAt - now }
    if (limits.length === 0) return OK
    let wait = 0
    for (const limit of limits) {
      const counter = counters.get(counterKey(scope, limit))
      if (counter === undefined || counter.endsAt <= now) continue
      if (counter.used >= limit.count) wait = Math.max(wait, counter.endsAt - now)
    }
    if (wait > 0) return { kind: 'budget', ms: wait }
    for (const limit of limits) {
      const key = counterKey(scope, limit)
      const counter = counters.get(key)
      if (counter === undefined || counter.endsAt <= now) counters.set(key, { used: 1, endsAt: now + limit.windowMs })
      else counter.used += 1
    }
    return OK
  }

  function coolDown (scope: string, request: CooldownRequest): number {
    const now = clock.now()
    const current = cooldowns.get(scope)
    const activeMs = current === undefined ? 0 : Math.max(0, current.endsAt - now)
    // The backoff remembers the last cool-down for its own length after it ended.
    const previousMs = current !== undefined && now < current.endsAt + current.lengthMs ? current.lengthMs : undefined
    const lengthMs = nextCooldownMs(request, activeMs, previousMs)
    if (lengthMs === undefined) return activeMs
    cooldowns.set(scope, { endsAt: now + lengthMs, lengthMs })
    return lengthMs
  }

  function cooldownEnd (scope: string): number | undefined {
    const cooldown = cooldowns.get(scope)
    return cooldown !== undefined && cooldown.endsAt > clock.now() ? cooldown.endsAt : undefined
  }

  return { take, coolDown, cooldownEnd }
}
