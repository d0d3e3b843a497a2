// What this sidecar itself sent, per rule and limit: the ledger every other guarantee rests
// on. Always kept, also while Redis answers, so that a sidecar cut off from Redis knows its
// own spend, and a Redis that comes back (or lost its data) can be told again. Pure: no I/O,
// time read from the injected monotonic clock.
import type { Clock } from '../clock.js'
import type { Limit } from '../config/rate-limit-rules.js'

/** One upstream send: an id unique in the fleet, and when it was admitted (monotonic ms). */
export interface Send {
  readonly id: string
  readonly at: number
}

/** A send still inside its window, for telling Redis again: how long ago it went out. */
export interface OpenSend {
  readonly scope: string
  readonly limit: Limit
  readonly id: string
  readonly ageMs: number
}

/**
 * Sliding windows: a send counts against its limit N/W for W ms after it was admitted, so
 * that in any interval of length W at most N sends go out, whatever window alignment the
 * gateway counts in (a fixed window starting at the first send allows 2N across its edge).
 */
export interface Ledger {
  /**
   * Ms until every limit has room for one more send when each may hold `capacity(limit)`
   * sends per window: 0 for now, Infinity when a capacity is 0.
   */
  wait: (scope: string, limits: readonly Limit[], capacity?: (limit: Limit) => number) => number
  /** Records a send under every limit of its rule. */
  record: (scope: string, limits: readonly Limit[], id: string) => void
  /** Forgets a send that never reached the upstream (nothing was written). */
  refund: (scope: string, limits: readonly Limit[], id: string) => void
  /** How many of this sidecar's sends are inside `limit`'s window for `scope` now. */
  used: (scope: string, limit: Limit) => number
  /** Every send still inside a window, oldest first per limit. */
  open: () => OpenSend[]
  /** Puts back a send an earlier run made (ledger-file.ts), admitted at monotonic `at`, in order. */
  restore: (scope: string, limit: Limit, id: string, at: number) => void
}

const FULL = (limit: Limit): number => limit.count

export function createLedger (clock: Clock): Ledger {
  /** Per scope and limit: the sends inside the window, oldest first. */
  const logs = new Map<string, { scope: string, limit: Limit, sends: Send[] }>()
  const keyOf = (scope: string, limit: Limit): string => `${scope}\n${limit.text}`

  /** The log's sends still inside the window at `now` (older ones are dropped). */
  function live (scope: string, limit: Limit, now: number): Send[] {
    const key = keyOf(scope, limit)
    const log = logs.get(key)
    if (log === undefined) return []
    let gone = 0
    while (gone < log.sends.length && now - (log.sends[gone]?.at ?? 0) >= limit.windowMs) gone++
    if (gone > 0) log.sends.splice(0, gone)
    if (log.sends.length === 0) logs.delete(key)
    return log.sends
  }

  function wait (scope: string, limits: readonly Limit[], capacity = FULL): number {
    const now = clock.now()
    let ms = 0
    for (const limit of limits) {
      const cap = capacity(limit)
      if (cap <= 0) return Infinity
      const sends = live(scope, limit, now)
      // Stryker disable next-line ConditionalExpression: with fewer sends than cap, `leaving` below is undefined and nothing is waited for
      if (sends.length < cap) continue
      // The send that must leave the window before one more fits.
      const leaving = sends[sends.length - cap]
      if (leaving !== undefined) ms = Math.max(ms, leaving.at + limit.windowMs - now)
    }
    return ms
  }

  function record (scope: string, limits: readonly Limit[], id: string): void {
    const at = clock.now()
    for (const limit of limits) {
      const key = keyOf(scope, limit)
      const log = logs.get(key)
      if (log === undefined) logs.set(key, { scope, limit, sends: [{ id, at }] })
      else log.sends.push({ id, at })
    }
  }

  function refund (scope: string, limits: readonly Limit[], id: string): void {
    for (const limit of limits) {
      const log = logs.get(keyOf(scope, limit))
      // Stryker disable next-line UnaryOperator: without a log there is nothing to splice whatever the index
      const index = log?.sends.findIndex((s) => s.id === id) ?? -1
      if (index !== -1) log?.sends.splice(index, 1)
    }
  }

  function open (): OpenSend[] {
    const now = clock.now()
    const out: OpenSend[] = []
    for (const { scope, limit } of [...logs.values()]) {
      for (const send of live(scope, limit, now)) out.push({ scope, limit, id: send.id, ageMs: now - send.at })
    }
    return out
  }

  function restore (scope: string, limit: Limit, id: string, at: number): void {
    const key = keyOf(scope, limit)
    const sends = logs.get(key)?.sends ?? []
    sends.push({ id, at })
    sends.sort((a, b) => a.at - b.at)
    logs.set(key, { scope, limit, sends })
  }

  return {
    wait,
    record,
    restore,
    refund,
    used: (scope, limit) => live(scope, limit, clock.now()).length,
    open
  }
}
