// Where budgets and cool-downs live: the contract both stores keep (the local one, per
// sidecar, below; the fleet's, shared through Redis with the local ledger as its insurance,
// in fleet-store.ts), and the cool-downs every sidecar keeps locally until they end.
import { randomUUID } from 'node:crypto'
import type { Clock } from '../clock.js'
import { createLedger, type Ledger } from './ledger.js'
import type { Limit } from '../config/rate-limit-rules.js'

/** The scope of a request that matches no rule: with no rules at all, the whole upstream cools down. */
export const UPSTREAM_SCOPE = 'upstream'

/** What a take found: the request may go (one point taken from every limit), or why not and for how long. */
export type Take =
  /**
   * Taken: `id` names the send (for a refund when nothing reached the upstream). `alone`:
   * decided without Redis, so only this sidecar's ledger holds it.
   */
  | { readonly kind: 'ok', readonly id: string, readonly alone?: boolean }
  /** The scope is cooling down for `ms` more; nothing was taken. */
  | { readonly kind: 'cooldown', readonly ms: number }
  /** A limit is spent; all of them have room again in `ms` (a wait may be worth it); nothing was taken. */
  | { readonly kind: 'budget', readonly ms: number }
  /**
   * The fleet's tally cannot be read (Redis does not answer, or lost its data) and this
   * sidecar's share is spent or not yet safe to use: refused, ask again in `ms`; nothing was taken.
   * `lost`: Redis answers, but its tally lost a window (restarted empty) and is not trusted yet.
   * `aloneEnded`: cut off for longer than RATE_LIMIT_ALONE_MAX_MS: nothing until Redis answers.
   * `unrecorded`: decided alone, but STATE_DIR's ledger cannot record it (given back).
   */
  | { readonly kind: 'degraded', readonly ms: number, readonly lost?: boolean, readonly aloneEnded?: boolean, readonly unrecorded?: boolean }

/** Why an admitted send must not leave after all, and the ms after which to ask again. */
export interface Stopped {
  readonly reason: 'budget' | 'degraded'
  readonly ms: number
  /** Decided alone, and cut off for longer than RATE_LIMIT_ALONE_MAX_MS by the time it leaves. */
  readonly aloneEnded?: true
}

/** A send held past the ledger's hold (a stalled STATE_DIR write, say): asked again in a second. */
export const HELD_PAST: Stopped = Object.freeze({ reason: 'budget', ms: 1_000 })

/** A take with nothing to take (a scope without limits, not cooling down): no id, nothing to refund. */
export const NOTHING_TAKEN: Take = Object.freeze({ kind: 'ok', id: '' })

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
   * If the scope is not cooling down and every limit has room, takes one point from each
   * (atomically across the fleet when shared); otherwise takes nothing (a refused or
   * abandoned request spends nothing).
   */
  take: (scope: string, limits: readonly Limit[]) => Take | Promise<Take>
  /** Gives a taken point back: nothing of the request was written to the upstream. */
  refund: (scope: string, limits: readonly Limit[], id: string) => void
  /**
   * The send's request is about to be written: it counts from now, not from its admission.
   * Or it must not go, because the tally may count it from earlier than now: it waited past
   * the ledger's hold (`budget`), or Redis placed it and cannot be told, or it was decided
   * alone and the alone bound has passed (`degraded`); its point is then given back with `refund`.
   */
  leaving: (scope: string, limits: readonly Limit[], id: string) => Stopped | undefined
  /** Starts (or lengthens) the scope's cool-down here, and in the fleet when shared; the ms until it ends here. */
  coolDown: (scope: string, request: CooldownRequest) => number
}

/**
 * The length of a new cool-down, shared by both stores. With a usable Retry-After, that
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

/**
 * The cool-downs this sidecar knows of, started here or met in the fleet's store, each kept
 * until it ends, whatever happens to Redis meanwhile. On the monotonic clock.
 */
export interface Cooldowns {
  /** Starts (or lengthens) a cool-down after a gateway rate-limit answer; the ms until it ends. */
  start: (scope: string, request: CooldownRequest) => number
  /** Adopts one learned elsewhere (`ms` from now) unless one under way ends later; says whether it did. */
  adopt: (scope: string, ms: number) => boolean
  /** Ms left of the scope's cool-down, 0 for none. */
  left: (scope: string) => number
  /** Every cool-down under way, with its monotonic end. */
  active: () => Array<{ scope: string, endsAt: number }>
}

export function createCooldowns (clock: Clock): Cooldowns {
  const cooldowns = new Map<string, { endsAt: number, lengthMs: number }>()

  function start (scope: string, request: CooldownRequest): number {
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

  function adopt (scope: string, ms: number): boolean {
    const endsAt = clock.now() + ms
    const current = cooldowns.get(scope)
    if (ms <= 0 || (current !== undefined && current.endsAt >= endsAt)) return false
    cooldowns.set(scope, { endsAt, lengthMs: Math.max(ms, current?.lengthMs ?? 0) })
    return true
  }

  function left (scope: string): number {
    const current = cooldowns.get(scope)
    return current === undefined ? 0 : Math.max(0, current.endsAt - clock.now())
  }

  function active (): Array<{ scope: string, endsAt: number }> {
    const now = clock.now()
    return [...cooldowns].filter(([, c]) => c.endsAt > now).map(([scope, c]) => ({ scope, endsAt: c.endsAt }))
  }

  return { start, adopt, left, active }
}

/** Ids of sends: this sidecar's id (random per start) and a counter, unique in the fleet. */
export function createSendIds (memberId: string): () => string {
  let n = 0
  // Stryker disable next-line UpdateOperator: counting down is as unique as counting up
  return () => `${memberId}:${(n++).toString(36)}`
}

// Stryker disable next-line MethodExpression: a whole UUID is as unique, only longer
export const newMemberId = (): string => randomUUID().slice(0, 13)

/** The store of a sidecar on its own (no Redis): its ledger is the whole tally. */
export function createLocalStore (clock: Clock, cooldowns: Cooldowns, ledger: Ledger = createLedger(clock)): Store {
  const nextId = createSendIds(newMemberId())
  return {
    take (scope, limits) {
      const cooling = cooldowns.left(scope)
      if (cooling > 0) return { kind: 'cooldown', ms: cooling }
      if (limits.length === 0) return NOTHING_TAKEN
      const wait = ledger.wait(scope, limits)
      if (wait > 0) return { kind: 'budget', ms: wait }
      const id = nextId()
      ledger.record(scope, limits, id)
      return { kind: 'ok', id }
    },
    refund: (scope, limits, id) => { ledger.refund(scope, limits, id) },
    leaving: (scope, limits, id) => {
      if (ledger.heldPast(scope, limits, id)) return HELD_PAST
      ledger.leave(scope, limits, id)
      return undefined
    },
    coolDown: (scope, request) => cooldowns.start(scope, request)
  }
}
