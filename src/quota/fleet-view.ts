// What the parts of the fleet's store (fleet-store.ts composes them) share: one view of the
// fleet that they read and change, and how each change of it reaches the metrics and the log.
// Loaded, like the rest of the fleet's store, only when RATE_LIMIT_REDIS_URL is set.
import type { FleetStoreOptions } from './fleet-store.js'

/** The fleet protocol's timing; tests shorten it. */
export interface FleetTiming {
  /** How often a sidecar renews its presence (and, while cut off, PINGs Redis). */
  heartbeatMs: number
  /** A sidecar not heard from for this long is absent: the others keep its share free. */
  presenceTtlMs: number
  /** An epoch younger than this may have replaced a lost one whose sidecars have not told it their sends yet. */
  freshGraceMs: number
}

export type FleetState = 'connecting' | 'shared' | 'degraded'

/** The fleet store's mutable state: one object, so that every part sees the same. */
export interface FleetView {
  /** Changed only by `setState` (below): its gauges follow it. */
  state: FleetState
  /** RATE_LIMIT_FLEET_SIZE, or the sidecars present at the last contact if more (a restart overlapping its earlier run). */
  size: number
  /** Sidecars present at the last contact with Redis. */
  present: number
  /**
   * The latest monotonic time at which Redis may still count this sidecar present (a script's
   * deadline + the presence TTL; at start, as if one was sent then): spending alone is safe
   * one window after it.
   */
  presenceBound: number
  /**
   * When the latest script Redis ran for this sidecar (renewing its presence) was sent, in
   * monotonic ms (-Infinity: none yet). Cut off, it spends alone until this +
   * RATE_LIMIT_ALONE_MAX_MS: in Redis's time no later than that script's run + the bound,
   * however late its own timers fire (fleet-alone.ts).
   */
  renewedAt: number
  /**
   * The wall clock when `renewedAt`'s script was sent: a suspended VM's monotonic clock stands
   * still while Redis's time runs on, so the bound is reached by whichever clock says so first.
   */
  renewedWallAt: number
  /** Monotonic ms until which an epoch too young to trust holds every budget. */
  graceUntil: number
  /** The grace of a first contact made at start: until then this sidecar has never had a tally to trust. */
  firstGraceUntil: number | undefined
  /** Whether start() is making the first contact (a later one may find a fleet already serving). */
  starting: boolean
  /** Redis has counted this process present: only then may it spend alone (Redis then holds its share while it is away). */
  everShared: boolean
  /** Why Redis is not used, when it is not (never a credential). */
  problem: string | undefined
  /** The reassertion under way (Redis is being told the ledger), if any. */
  reasserting: Promise<void> | undefined
  /** That reassertion follows Redis answering without its data (its epoch lost): refusals meanwhile say so. */
  epochLost: boolean
}

/** A view of a fleet not yet contacted: `presenceBound` as if a script was sent at start. */
export function createFleetView (fleetFloor: number, presenceBound: number): FleetView {
  return {
    state: 'connecting',
    size: fleetFloor,
    present: 0,
    presenceBound,
    renewedAt: -Infinity,
    // Stryker disable next-line UnaryOperator: read only once everShared, and what sets that renews this first
    renewedWallAt: -Infinity,
    graceUntil: -Infinity,
    firstGraceUntil: undefined,
    starting: true,
    everShared: false,
    problem: undefined,
    reasserting: undefined,
    epochLost: false
  }
}

/** A script Redis ran renewed this sidecar's presence: the latest sent one counts, on both clocks. */
export function renewed (view: FleetView, sent: { at: number, wallAt: number }): void {
  if (sent.at <= view.renewedAt) return
  view.renewedAt = sent.at
  view.renewedWallAt = sent.wallAt
}

export interface FleetReportOptions extends Pick<FleetStoreOptions, 'log' | 'metrics' | 'fleetFloor'> {
  view: FleetView
  /** Redis's URL as logged (never a credential). */
  displayUrl: string
  /**
   * The largest RATE_LIMIT_FLEET_SIZE on record in Redis at the last script (0: none told): in
   * a rollout raising it, that many may run at once (assumption 1), whatever this one declares.
   */
  largestDeclared: () => number
}

export type FleetReport = ReturnType<typeof createFleetReport>

/** Changes of the view that operators see: the state's gauges, the fleet's size, why Redis is not used. */
export function createFleetReport ({ view, log, metrics, fleetFloor, displayUrl, largestDeclared }: FleetReportOptions) {
  /** How many may be spending at once, what shares divide by: the fleet's size, or the largest size declared if more. */
  const spenders = (): number => Math.max(view.size, largestDeclared())

  /** The sidecars present when more than RATE_LIMIT_FLEET_SIZE was last reported (0: not over). */
  let reportedOver = 0
  let loggedProblem: string | undefined

  /** More sidecars present than declared (the guarantee's first assumption broken): logged once per change; /readyz and /status say it. */
  function reportFleetSize (): void {
    const present = view.present
    const over = fleetFloor > 0 && present > fleetFloor ? present : 0
    if (over === reportedOver) return
    reportedOver = over
    if (over > 0) {
      log.warn({ declared: fleetFloor, present },
        // Stryker disable next-line StringLiteral: log wording (the fields are tested)
        'more sidecars present than RATE_LIMIT_FLEET_SIZE declares: shares spent while cut off from redis may add up to more than a budget; set it to the most sidecars that run at once')
    } else {
      // Stryker disable next-line StringLiteral: log wording (the fields are tested)
      log.info({ declared: fleetFloor, present }, 'no more sidecars present than RATE_LIMIT_FLEET_SIZE declares')
    }
  }

  return {
    spenders,
    setState (next: FleetState): void {
      view.state = next
      metrics.rateLimitBackend.set({ backend: 'memory' }, next === 'shared' ? 0 : 1)
      metrics.rateLimitBackend.set({ backend: 'redis' }, next === 'shared' ? 1 : 0)
      metrics.rateLimitDegraded?.set(next === 'shared' ? 0 : 1)
      metrics.rateLimitRedisUp?.set(next === 'shared' ? 1 : 0)
    },

    /** What a script's reply says of the fleet: its size (never below the declared one) and who is present. */
    learn (reply: { fleetSize: number, present: number }): void {
      view.size = Math.max(reply.fleetSize, fleetFloor)
      view.present = reply.present
      metrics.rateLimitFleetSize?.set(spenders())
      metrics.rateLimitFleetPresent?.set(view.present)
      reportFleetSize()
    },

    /** Sets why Redis is not used (undefined: it is), and logs it once per change. */
    reportProblem (next: string | undefined, message: string): void {
      view.problem = next
      if (next === loggedProblem) return
      loggedProblem = next
      if (next !== undefined) log.warn({ redis: displayUrl, reason: next }, message)
    }
  }
}
