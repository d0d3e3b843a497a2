// What a sidecar of the fleet decides without Redis, from its own ledger: its share of each
// limit (floor(limit / the fleet size or the largest declared); none without
// RATE_LIMIT_FLEET_SIZE), and from when it is safe to spend. Part of the fleet's store
// (fleet-store.ts), loaded only with Redis.
import { longestWindowMs, type Limit, type Rule } from '../config/rate-limit-rules.js'
import type { Ledger } from './ledger.js'
import { ledgerBudget, type Remaining } from './rate-limit-fields.js'
import type { Take } from './store.js'
import type { FleetStoreOptions } from './fleet-store.js'
import type { FleetTiming, FleetView } from './fleet-view.js'

/**
 * How much faster Redis's clock (and TI's) may run than a sidecar's, as a fraction: NTP keeps a
 * disciplined clock's frequency within 500 ppm of true (ntpd's tolerance, the kernel's slew
 * rate), so two such clocks tick alike within 0.1 %.
 */
export const CLOCK_RATE_MARGIN = 0.001

/**
 * The span a sidecar tells Redis (0: none, no bound): its hold ends that long after its
 * presence. It spends alone for at most `aloneMaxMs` by its own clocks, and its last send
 * counts for the longest window after; the margin covers Redis's clock running that much
 * faster over both, which the presence TTL (3 s) alone does not over days.
 */
export function aloneSpanMs (aloneMaxMs: number | undefined, rules: readonly Rule[]): number {
  if (aloneMaxMs === undefined) return 0
  const span = aloneMaxMs + longestWindowMs(rules)
  return span + Math.ceil(span * CLOCK_RATE_MARGIN)
}

/**
 * A send admitted (by Redis or alone): the ledger holds it either way, the insurance for an
 * outage. One admitted `alone` goes out only once STATE_DIR's ledger holds it (persistingStore).
 */
export function admit (ledger: Ledger, scope: string, limits: readonly Limit[], id: string, at?: number, alone = false): Take {
  ledger.record(scope, limits, id, at)
  return alone ? { kind: 'ok', id, alone } : { kind: 'ok', id }
}

export interface AloneOptions extends Pick<FleetStoreOptions, 'clock' | 'fleetFloor' | 'aloneMaxMs'> {
  view: FleetView
  ledger: Ledger
  timing: FleetTiming
  /** When this process started: an earlier run of this sidecar may have spent until then. */
  bornAt: number
  /** Asks Redis at once whether it answers again: called by every take decided alone. */
  probeSoon: () => void
  /** How many may be spending at once: the fleet's size, or the largest size declared if more (fleet-view.ts). */
  spenders: () => number
}

export function createAlone ({ view, clock, ledger, timing, fleetFloor, bornAt, probeSoon, spenders, aloneMaxMs = Infinity }: AloneOptions) {
  /** Share of a limit this sidecar may spend on its own: none without RATE_LIMIT_FLEET_SIZE. */
  const shareOf = (limit: Limit): number => fleetFloor <= 0 ? 0 : Math.floor(limit.count / spenders())
  /** A fleet of one, declared and never contradicted (by a size present or declared): its ledger is the whole tally. */
  const oneOfOne = (): boolean => fleetFloor === 1 && spenders() === 1
  /**
   * Cut off for longer than RATE_LIMIT_ALONE_MAX_MS, counted from the send of the last script
   * Redis ran (it ran after it was sent): Redis ends this sidecar's hold its span (aloneSpanMs)
   * after its presence, so nothing more may go out alone (redis-scripts.ts, timeEnded). On
   * either clock: a suspended VM's monotonic clock stands still while Redis's time runs on; a
   * wall clock stepped back is caught by the monotonic one.
   */
  const ended = (now: number): boolean =>
    now - view.renewedAt >= aloneMaxMs || clock.wallNow() - view.renewedWallAt >= aloneMaxMs

  return {
    shareOf,
    /** Cut off now, counted present once, and past the bound: nothing decided alone may go out (fleet-departures.ts, /status). */
    endedNow: (): boolean => view.state !== 'shared' && view.everShared && ended(clock.now()),

    /**
     * A take decided without Redis: the share, from one window after Redis last counted this
     * sidecar present. A refusal says to ask again within a heartbeat at most: Redis is probed
     * that often and may answer by then (a fleet of one knows exactly: its ledger is the tally).
     */
    take (scope: string, limits: readonly Limit[], id: string): Take {
      probeSoon()
      // Redis is being told the ledger: a send admitted now could miss that snapshot (after a
      // lost epoch the refusal says Redis lost its data, not that it is silent). Never counted
      // present by Redis: nobody would hold back what it spent (redis-scripts.ts).
      if (view.reasserting !== undefined || !view.everShared) return { kind: 'degraded', ms: timing.heartbeatMs, ...(view.epochLost ? { lost: true } : {}) }
      const now = clock.now()
      if (ended(now)) return { kind: 'degraded', ms: timing.heartbeatMs, aloneEnded: true }
      if (oneOfOne()) {
        // Its ledger is the whole tally, but for what an earlier run of it sent.
        let ms = 0
        for (const limit of limits) ms = Math.max(ms, bornAt + limit.windowMs - now)
        if (ms <= 0) ms = ledger.wait(scope, limits)
        return ms > 0 ? { kind: 'degraded', ms } : admit(ledger, scope, limits, id, undefined, true)
      }
      let ms = 0
      for (const limit of limits) {
        // Share 0 (or no fleet size declared): nothing until Redis answers.
        if (shareOf(limit) === 0) return { kind: 'degraded', ms: timing.heartbeatMs }
        ms = Math.max(ms, view.presenceBound + limit.windowMs - now)
      }
      if (ms <= 0) ms = ledger.wait(scope, limits, shareOf)
      return ms > 0 ? { kind: 'degraded', ms: Math.min(ms, timing.heartbeatMs) } : admit(ledger, scope, limits, id, undefined, true)
    },

    /** What `take` would still let each limit send (RateLimit fields): its share's room, none while it would refuse. */
    budget (scope: string, limits: readonly Limit[]): Remaining[] {
      const now = clock.now()
      const one = oneOfOne()
      return ledgerBudget(ledger, scope, limits, (limit) => one ? limit.count : shareOf(limit)).map((remaining, i) => {
        const limit = limits[i] as Limit
        const ms = view.reasserting !== undefined || !view.everShared || ended(now) || (!one && shareOf(limit) === 0)
          ? timing.heartbeatMs
          : (one ? bornAt : view.presenceBound) + limit.windowMs - now
        return ms > 0 ? { left: 0, resetMs: Math.max(ms, remaining.resetMs) } : remaining
      })
    }
  }
}
