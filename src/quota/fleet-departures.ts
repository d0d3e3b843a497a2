// What happens to a send the fleet's store admitted, until it leaves: the quota guard says
// when its request is written (`leaving`) or that nothing of it will be (`refund`). Part of
// the fleet's store (fleet-store.ts).
//
// While it waits (for an upstream connection, a connect, the STATE_DIR write) the ledger
// counts it as leaving now; Redis timed it from its take and would drop it a window later,
// when another sidecar could spend its place while it still waits and both reach TI together.
// So it is renewed in Redis (LEAVING: ZADD GT at Redis's TIME) every half of its shortest
// window: Redis never holds it older than that half, nor drops it. One timer per rule renews
// all of that rule's waiting sends in one script, so the cost grows with the rules, not the
// sends. Renewal ends when a send leaves (re-timed once more if late), is given back, or the
// ledger stops holding it (PENDING_HOLD_MS).
//
// A send Redis admitted (or was told of again) that leaves late while Redis cannot be told
// (degraded, or a command unanswered past its timeout) would be counted by the fleet from where Redis last
// placed it, earlier than TI counts it: another sidecar could spend its place while TI still
// counts it. It is refused instead, unsent. So is a send decided alone that leaves once the
// alone bound has passed (a stalled STATE_DIR write, a slow connect): Redis ends this
// sidecar's hold a window after the bound, and TI would count it past that.
import type { Clock } from '../clock.js'
import type { Limit } from '../config/rate-limit-rules.js'
import { PENDING_HOLD_MS, type Ledger, type OpenSend } from './ledger.js'
import type { RedisStore } from './redis-backend.js'
import { HELD_PAST, type Stopped, type Take } from './store.js'
import type { FleetView } from './fleet-view.js'

/**
 * A send that leaves sooner than this after its take was asked of Redis keeps Redis's time
 * (in the ledger it counts from when it left): it went out with no wait but this process's
 * own (the event loop, the dispatch), well under this even on a loaded machine; a wait for a
 * connection or a STATE_DIR write is longer than this or absent. Redis so counts each send
 * from at most this much before it left.
 */
export const RETIME_AFTER_MS = 50

type TakeFn = (scope: string, limits: readonly Limit[]) => Take | Promise<Take>

export interface DeparturesOptions {
  clock: Clock
  ledger: Ledger
  redis: RedisStore
  view: FleetView
  /** A send refused as it leaves is asked again after this (Redis is probed that often). */
  retryMs: number
  /**
   * A script Redis has left unanswered for longer than this (its timeout: redis.unansweredFor):
   * Redis may be frozen while still counted shared, and a re-time sent now may never land.
   */
  quietMs: number
  /** Cut off for longer than RATE_LIMIT_ALONE_MAX_MS now: a send decided alone must not leave (fleet-alone.ts). */
  aloneEnded: () => boolean
}

/** One rule's sends waiting to leave, each with when the ledger stops holding it; renewed by one timer. */
interface Waiting {
  limits: readonly Limit[]
  everyMs: number
  ids: Map<string, number>
  cancel: (() => void) | undefined
}

/** Most send ids renewed in one script (a rule may have thousands waiting behind a full pool). */
const RENEW_BATCH = 1_000

export function createDepartures ({ clock, ledger, redis, view, retryMs, quietMs, aloneEnded }: DeparturesOptions) {
  const waiting = new Map<string, Waiting>()
  /** Sends Redis admitted and that have not left: no earlier than when Redis last placed each (its take, or a renewal it answered). */
  const placed = new Map<string, number>()
  /** Sends decided alone (cut off from Redis) that have not left. */
  const alone = new Set<string>()
  let closed = false

  /** Tells Redis the sends leave now, while shared. Fire and forget, as a refund: a re-time Redis misses leaves them at their last time there. */
  const retime = (scope: string, limits: readonly Limit[], ids: readonly string[]): void => {
    if (view.state !== 'shared') return
    const askedAt = clock.now()
    for (let i = 0; i < ids.length; i += RENEW_BATCH) {
      const batch = ids.slice(i, i + RENEW_BATCH)
      redis.leaving(scope, limits, ...batch).then(() => {
        for (const id of batch) if (placed.has(id)) placed.set(id, askedAt)
      }, () => {})
    }
  }

  function arm (scope: string, rule: Waiting, ms: number): void {
    rule.cancel = clock.setTimer(() => {
      const now = clock.now()
      for (const [id, until] of rule.ids) {
        if (until > now) continue
        rule.ids.delete(id)
        placed.delete(id)
      }
      if (rule.ids.size === 0) {
        waiting.delete(scope)
        return
      }
      retime(scope, rule.limits, [...rule.ids.keys()])
      arm(scope, rule, rule.everyMs)
    }, ms)
  }

  /** A send admitted (its take asked of Redis at `askedAt`): renewed every half window until it leaves or is given back. */
  function admitted (scope: string, limits: readonly Limit[], id: string, askedAt: number): void {
    const everyMs = Math.floor(Math.min(...limits.map((limit) => limit.windowMs)) / 2)
    // A window of 2 ms or less has no half to renew in; one of twice the hold or more
    // outlasts any wait the ledger still holds as leaving now. Closed (a take in flight when
    // the store closed): Redis is no longer asked anything.
    if (closed || everyMs < 1 || everyMs >= PENDING_HOLD_MS) return
    let rule = waiting.get(scope)
    if (rule === undefined) {
      rule = { limits, everyMs, ids: new Map(), cancel: undefined }
      waiting.set(scope, rule)
      // Redis timed the send no earlier than its take was asked: half a window from then.
      arm(scope, rule, Math.max(0, askedAt + everyMs - clock.now()))
    }
    rule.ids.set(id, askedAt + PENDING_HOLD_MS)
  }

  /** Redis admitted the send (its take asked at `askedAt`): it placed it no earlier than that. */
  function placedBy (id: string, askedAt: number): void {
    if (!closed) placed.set(id, askedAt)
  }

  function settled (scope: string, id: string): void {
    placed.delete(id)
    alone.delete(id)
    const rule = waiting.get(scope)
    if (rule === undefined || !rule.ids.delete(id) || rule.ids.size > 0) return
    rule.cancel?.()
    waiting.delete(scope)
  }

  const renewed = (scope: string, limits: readonly Limit[], taken: Take, askedAt: number): Take => {
    if (taken.kind !== 'ok' || taken.id === '') return taken
    if (taken.alone === true && !closed) alone.add(taken.id)
    admitted(scope, limits, taken.id, askedAt)
    return taken
  }

  return {
    /** A store's take, every send it admits renewed while it waits. */
    renewing: (take: TakeFn): TakeFn => (scope, limits) => {
      const askedAt = clock.now()
      const taken = take(scope, limits)
      return taken instanceof Promise ? taken.then((t) => renewed(scope, limits, t, askedAt)) : renewed(scope, limits, taken, askedAt)
    },
    /** Nothing of the request was written: its point goes back, here and in Redis. */
    refund (scope: string, limits: readonly Limit[], id: string): void {
      settled(scope, id)
      ledger.refund(scope, limits, id)
      // Over-counting is safe: a refund Redis misses only holds a point it did not need to.
      if (view.state === 'shared') redis.refund(scope, limits, id).catch(() => {})
    },
    placedBy,
    /** A reassertion asked at `askedAt` told Redis these: those still waiting are placed from then. */
    reasserted (sends: readonly OpenSend[], askedAt: number): void {
      for (const send of sends) if (!ledger.heldPast(send.scope, [send.limit], send.id)) placedBy(send.id, askedAt)
    },
    /**
     * Its request is about to be written: it counts from now; Redis is told only when it waited
     * (no round trip on the common path). Or it must not go (Store.leaving): held past the
     * ledger's hold; decided alone, and the alone bound has passed; or Redis admitted it, it
     * waited since Redis last placed it, and Redis cannot be told now (its point is then given
     * back with `refund`, nothing written).
     */
    leaving (scope: string, limits: readonly Limit[], id: string): Stopped | undefined {
      if (ledger.heldPast(scope, limits, id)) return HELD_PAST
      if (alone.has(id) && aloneEnded()) return { reason: 'degraded', ms: retryMs, aloneEnded: true }
      const placedAt = placed.get(id)
      const now = clock.now()
      if (placedAt !== undefined && now - placedAt >= RETIME_AFTER_MS && (view.state !== 'shared' || redis.unansweredFor() > quietMs)) {
        return { reason: 'degraded', ms: retryMs }
      }
      settled(scope, id)
      if (ledger.leave(scope, limits, id) >= RETIME_AFTER_MS) retime(scope, limits, [id])
      return undefined
    },
    /** Sends being renewed now. */
    waiting: (): number => [...waiting.values()].reduce((n, rule) => n + rule.ids.size, 0),
    close (): void {
      closed = true
      for (const rule of waiting.values()) rule.cancel?.()
      waiting.clear()
      placed.clear()
      alone.clear()
    }
  }
}
