// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-10, §4 and §5; both are
// Structured Field Lists, RFC 9651): every answer of a budgeted rule tells its caller each limit
// of the rule and what the fleet may still send of it. Honest, never optimistic: the remaining is
// read from the fleet's tally after the request's own point was taken (or from this sidecar's
// share while Redis is away, src/quota/fleet-alone.ts), so a caller never reads more than the
// fleet really has; a local refusal says none.
import type { ServerResponse } from 'node:http'
import type { Limit, Rule } from '../config/rate-limit-rules.js'
import type { Metrics } from '../metrics.js'
import type { Ledger } from './ledger.js'

/** What one limit may still send now, and the ms until that grows (a send leaves the window). */
export interface Remaining {
  readonly left: number
  readonly resetMs: number
}

/**
 * From this sidecar's own ledger: what each limit may still send when it may hold
 * `capacity(limit)` sends per window, and when that grows (the oldest send's exit while there
 * is room, else the exit that makes room for one more).
 */
export function ledgerBudget (ledger: Ledger, scope: string, limits: readonly Limit[], capacity: (limit: Limit) => number): Remaining[] {
  return limits.map((limit) => {
    const used = ledger.used(scope, limit)
    const cap = capacity(limit)
    const left = Math.max(0, cap - used)
    // With room for exactly `used`, the wait is until the oldest leaves.
    const resetMs = used === 0 ? 0 : ledger.wait(scope, [limit], () => (left > 0 ? used : cap))
    return { left, resetMs: resetMs === Infinity ? limit.windowMs : resetMs }
  })
}

/** Whole seconds, rounded up: a window or a wait is never said to be shorter than it is. */
const seconds = (ms: number): number => Math.ceil(ms / 1000)

/** RateLimit-Policy: each limit as a quota policy named by its text, e.g. `"1/4h";q=1;w=14400`. */
export function policyField (limits: readonly Limit[]): string {
  // The limit's text (N/WINDOW, digits and letters) needs no escaping in an sf-string.
  return limits.map((l) => `"${l.text}";q=${l.count};w=${Math.max(1, seconds(l.windowMs))}`).join(', ')
}

/** RateLimit: what each limit may still send (r) and the seconds until that grows (t). */
export function rateLimitField (limits: readonly Limit[], remaining: readonly Remaining[]): string {
  return limits.map((l, i) => {
    const r = remaining[i] ?? { left: 0, resetMs: l.windowMs }
    return `"${l.text}";r=${Math.max(0, r.left)};t=${seconds(Math.max(0, r.resetMs))}`
  }).join(', ')
}

/** Sets both fields on an answer whose head is not written yet. */
export function setFields (res: ServerResponse, limits: readonly Limit[], remaining: readonly Remaining[]): void {
  if (res.headersSent) return
  res.setHeader('RateLimit-Policy', policyField(limits))
  res.setHeader('RateLimit', rateLimitField(limits, remaining))
}

/** The guard's read of a rule's budget (QuotaGuard.budget). */
export type ReadBudget = (rule: Rule) => readonly Remaining[] | Promise<readonly Remaining[]>

export interface RateLimitFields {
  /** Reads the rule's budget, sets the fields on `res`, then calls `then` (at once when the read is local). */
  withFields: (rule: Rule | undefined, res: ServerResponse, then: () => void) => void
  /** A local refusal: nothing remains of any limit until `retryAfterMs` at least. */
  refused: (rule: Rule | undefined, res: ServerResponse, retryAfterMs: number) => void
}

export function createRateLimitFields (read: ReadBudget): RateLimitFields {
  return {
    withFields (rule, res, then) {
      if (rule === undefined) {
        then()
        return
      }
      const remaining = read(rule)
      if (!(remaining instanceof Promise)) {
        setFields(res, rule.limits, remaining)
        then()
        return
      }
      // The fleet's read never fails (fleet-store.ts falls back to the share); should it, the
      // answer goes without the fields rather than not at all.
      remaining.then((r) => { setFields(res, rule.limits, r) }, () => {}).finally(then)
    },
    refused (rule, res, retryAfterMs) {
      if (rule === undefined) return
      setFields(res, rule.limits, rule.limits.map(() => ({ left: 0, resetMs: retryAfterMs })))
    }
  }
}

/** rate_limit_remaining and rate_limit_quota for every limit of every rule, read at each scrape. */
export function exportBudgets (metrics: Metrics, rules: readonly Rule[], read: ReadBudget): void {
  for (const rule of rules) {
    for (const limit of rule.limits) metrics.rateLimitQuota.set({ rule: rule.id, limit: limit.text }, limit.count)
  }
  metrics.readBudgets(async () => {
    await Promise.all(rules.map(async (rule) => {
      const remaining = await read(rule)
      rule.limits.forEach((limit, i) => { metrics.rateLimitRemaining.set({ rule: rule.id, limit: limit.text }, remaining[i]?.left ?? 0) })
    }))
  })
}
