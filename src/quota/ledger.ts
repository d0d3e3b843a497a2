// What this sidecar itself sent, per rule and limit: the ledger every other guarantee rests
// on. Always kept, also while Redis answers, so that a sidecar cut off from Redis knows its
// own spend, and a Redis that comes back (or lost its data) can be told again. Pure: no I/O,
// time read from the injected monotonic clock.
import type { Clock } from '../clock.js'
import type { Limit } from '../config/rate-limit-rules.js'

/** One upstream send: an id unique in the fleet, and when it counts from (monotonic ms). */
export interface Send {
  readonly id: string
  readonly at: number
}

/**
 * How long an admitted send that has not left yet counts as leaving now (ms). It leaves (its
 * request is written) within UPSTREAM_QUEUE_TIMEOUT_MS (5 s) and the connect timeout (10 s)
 * or is given back; this bounds what a point neither spent nor given back can hold: from
 * then on, it counts as having left at its admission plus this.
 */
export const PENDING_HOLD_MS = 60_000

/** A send still inside its window, for telling Redis again: how long ago it went out. */
export interface OpenSend {
  readonly scope: string
  readonly limit: Limit
  readonly id: string
  readonly ageMs: number
  /** Not left yet (age 0): it leaves within this many ms, or never (past its hold it is refused). */
  readonly leavesWithinMs?: number
}

/**
 * Sliding windows: a send counts against its limit N/W for W ms after it left (its request
 * was written: `leave`), and as leaving now from its admission until then, so that in any
 * interval of length W at most N sends reach the upstream, however long each waited to leave
 * and whatever window alignment the gateway counts in (a fixed window starting at the first
 * send allows 2N across its edge).
 */
export interface Ledger {
  /**
   * Ms until every limit has room for one more send when each may hold `capacity(limit)`
   * sends per window: 0 for now, Infinity when a capacity is 0.
   */
  wait: (scope: string, limits: readonly Limit[], capacity?: (limit: Limit) => number) => number
  /**
   * Records a send admitted under every limit of its rule: it counts as leaving now until
   * `leave`. `at` (default now) is what its lateness is measured from: for a take Redis decided,
   * when it was asked (Redis timed it no earlier).
   */
  record: (scope: string, limits: readonly Limit[], id: string, at?: number) => void
  /**
   * The send's request is being written: it counts from now (never earlier than before).
   * Returns how much later that is than it counted from (its admission, while it waited; 0
   * when the ledger does not hold it).
   */
  leave: (scope: string, limits: readonly Limit[], id: string) => number
  /**
   * Whether a limit no longer holds the send as leaving now: past PENDING_HOLD_MS since its
   * admission it counts from the hold's end, earlier than it would reach the upstream, and must
   * not leave (also true once it left or was given back; false with no limits to hold it).
   */
  heldPast: (scope: string, limits: readonly Limit[], id: string) => boolean
  /** Forgets a send that never reached the upstream (nothing was written). */
  refund: (scope: string, limits: readonly Limit[], id: string) => void
  /** How many of this sidecar's sends are inside `limit`'s window for `scope` now. */
  used: (scope: string, limit: Limit) => number
  /** Every send still inside a window, oldest first per limit (one not left yet: age 0, and how long it may still leave). */
  open: () => OpenSend[]
  /** Puts back a send an earlier run made (ledger-file.ts), admitted at monotonic `at`, in order. */
  restore: (scope: string, limit: Limit, id: string, at: number) => void
}

const FULL = (limit: Limit): number => limit.count

/** Puts a send in its place in a log kept oldest first (usually the end). */
function insertByTime (sends: Send[], send: Send): void {
  let at = sends.length
  while (at > 0 && (sends[at - 1]?.at ?? 0) > send.at) at--
  sends.splice(at, 0, send)
}

/** Takes the send `id` out of `sends`, if there. */
function takeOut (sends: Send[], id: string): Send | undefined {
  const index = sends.findIndex((s) => s.id === id)
  return index === -1 ? undefined : sends.splice(index, 1)[0]
}

interface Log {
  readonly scope: string
  readonly limit: Limit
  /** Sends that left, oldest first: each counts from when it left. */
  readonly sent: Send[]
  /** Sends admitted and not left yet, `at` their admission: each counts as leaving now. */
  readonly waiting: Send[]
}

/** The sends a log counts: those that left and those waiting to. */
const counted = (log: Log): number => log.sent.length + log.waiting.length

export function createLedger (clock: Clock): Ledger {
  /** Per scope and limit: the sends inside the window. */
  const logs = new Map<string, Log>()
  const keyOf = (scope: string, limit: Limit): string => `${scope}\n${limit.text}`

  function logOf (scope: string, limit: Limit): Log {
    const key = keyOf(scope, limit)
    const found = logs.get(key)
    if (found !== undefined) return found
    const log: Log = { scope, limit, sent: [], waiting: [] }
    logs.set(key, log)
    return log
  }

  /** The log with its sends still inside the window at `now` (older ones are dropped); undefined when empty. */
  function live (scope: string, limit: Limit, now: number): Log | undefined {
    const key = keyOf(scope, limit)
    const log = logs.get(key)
    if (log === undefined) return undefined
    // A send waiting past the hold counts as having left when the hold ended.
    while (log.waiting.length > 0 && now - (log.waiting[0]?.at ?? 0) >= PENDING_HOLD_MS) {
      const held = log.waiting.shift() as Send
      insertByTime(log.sent, { id: held.id, at: held.at + PENDING_HOLD_MS })
    }
    let gone = 0
    while (gone < log.sent.length && now - (log.sent[gone]?.at ?? 0) >= limit.windowMs) gone++
    if (gone > 0) log.sent.splice(0, gone)
    if (counted(log) > 0) return log
    logs.delete(key)
    return undefined
  }

  function wait (scope: string, limits: readonly Limit[], capacity = FULL): number {
    const now = clock.now()
    let ms = 0
    for (const limit of limits) {
      const cap = capacity(limit)
      if (cap <= 0) return Infinity
      const log = live(scope, limit, now)
      if (log === undefined) continue
      if (counted(log) < cap) continue
      // The send that must leave the window before one more fits: a waiting one leaves it a window from now at the soonest.
      const leaving = counted(log) - cap
      const at = leaving < log.sent.length ? (log.sent[leaving]?.at ?? now) : now
      ms = Math.max(ms, at + limit.windowMs - now)
    }
    return ms
  }

  function record (scope: string, limits: readonly Limit[], id: string, at = clock.now()): void {
    for (const limit of limits) logOf(scope, limit).waiting.push({ id, at })
  }

  function leave (scope: string, limits: readonly Limit[], id: string): number {
    const now = clock.now()
    let late = 0
    for (const limit of limits) {
      const log = live(scope, limit, now)
      if (log === undefined) continue
      const send = takeOut(log.waiting, id) ?? takeOut(log.sent, id)
      if (send === undefined) continue
      late = Math.max(late, now - send.at)
      insertByTime(log.sent, { id, at: Math.max(now, send.at) })
    }
    return late
  }

  function heldPast (scope: string, limits: readonly Limit[], id: string): boolean {
    const now = clock.now()
    return limits.some((limit) => live(scope, limit, now)?.waiting.some((send) => send.id === id) !== true)
  }

  function refund (scope: string, limits: readonly Limit[], id: string): void {
    for (const limit of limits) {
      const log = logs.get(keyOf(scope, limit))
      if (log !== undefined && takeOut(log.waiting, id) === undefined) takeOut(log.sent, id)
    }
  }

  function open (): OpenSend[] {
    const now = clock.now()
    const out: OpenSend[] = []
    for (const { scope, limit } of [...logs.values()]) {
      const log = live(scope, limit, now)
      if (log === undefined) continue
      for (const send of log.sent) out.push({ scope, limit, id: send.id, ageMs: now - send.at })
      for (const send of log.waiting) out.push({ scope, limit, id: send.id, ageMs: 0, leavesWithinMs: send.at + PENDING_HOLD_MS - now })
    }
    return out
  }

  function restore (scope: string, limit: Limit, id: string, at: number): void {
    insertByTime(logOf(scope, limit).sent, { id, at })
  }

  return {
    wait,
    record,
    leave,
    heldPast,
    restore,
    refund,
    used: (scope, limit) => {
      const log = live(scope, limit, clock.now())
      return log === undefined ? 0 : counted(log)
    },
    open
  }
}
