// The token manager's status: the record of its requests since the last success, and what
// /readyz and /status show of it, of the held token and of the pending attempt.
import type { AttemptTimer } from './attempt-timer.js'
import type { TokenInfo, TokenRequestError } from './token-client.js'
import type { Token } from './token-manager.js'

/** What /readyz and /status show. Every instant is wall-clock unix ms, derived for display. */
export interface TokenState {
  hasValidToken: boolean
  expiresAt: number | undefined
  refreshesAt: number | undefined
  generation: number | undefined
  info: TokenInfo | undefined
  /** A token request is in flight. */
  refreshing: boolean
  everHadToken: boolean
  credentialsRejected: boolean
  consecutiveFailures: number
  /** The outcome of the last failed token request since the last success. */
  lastFailure: string | undefined
  lastFailureReason: string | undefined
  lastFailureAt: number | undefined
  nextAttemptAt: number | undefined
}

/** The failures since the last token arrived, and whether one ever did. */
export class RequestRecord {
  #failures = 0
  #lastFailure: TokenRequestError | undefined
  // Stryker disable next-line UnaryOperator: read only after a failure has set it (mayStartOnDemand checks lastFailure first)
  #lastFailedAt = -Infinity
  #lastFailedWallAt: number | undefined
  #everHadToken = false

  /** Consecutive failed requests. */
  get failures (): number { return this.#failures }
  get lastFailure (): TokenRequestError | undefined { return this.#lastFailure }
  /** Monotonic. */
  get lastFailedAt (): number { return this.#lastFailedAt }
  /** Wall clock (unix ms), for display. */
  get lastFailedWallAt (): number | undefined { return this.#lastFailedWallAt }
  get everHadToken (): boolean { return this.#everHadToken }

  failed (error: TokenRequestError, now: number, wallNow: number): void {
    this.#failures += 1
    this.#lastFailure = error
    this.#lastFailedAt = now
    this.#lastFailedWallAt = wallNow
  }

  succeeded (): void {
    this.#failures = 0
    this.#lastFailure = undefined
    this.#lastFailedWallAt = undefined
    this.#everHadToken = true
  }
}

export interface StateParts {
  /** The token if it may still be sent now. */
  held: Token | undefined
  /** Wall minus monotonic now: one reading of the clocks for every time shown, so they agree. */
  toWallNow: number
  timer: Pick<AttemptTimer, 'kind' | 'nextAttemptAt'>
  refreshing: boolean
  record: RequestRecord
  credentialsRejected: boolean
}

export function tokenState ({ held, toWallNow, timer, refreshing, record, credentialsRejected }: StateParts): TokenState {
  const { nextAttemptAt } = timer
  const shown = shownTimes(held, timer.kind === 'refresh' ? nextAttemptAt : undefined, toWallNow)
  return {
    hasValidToken: held !== undefined,
    ...shown,
    generation: held?.generation,
    info: held?.info,
    refreshing,
    everHadToken: record.everHadToken,
    credentialsRejected,
    consecutiveFailures: record.failures,
    lastFailure: record.lastFailure?.outcome,
    lastFailureReason: record.lastFailure?.message,
    lastFailureAt: record.lastFailedWallAt,
    // The refresh pending is one instant, shown once: as refreshesAt, which the wall clock may bring forward.
    nextAttemptAt: shown.refreshesAt ?? (nextAttemptAt === undefined ? undefined : Math.round(nextAttemptAt + toWallNow))
  }
}

/**
 * A held token's expiry and due refresh as wall-clock unix ms, for display. Pure. Each
 * is the monotonic instant carried to the wall clock (`toWallNow`: wall minus monotonic
 * now), or the wall-clock reading taken when the token was requested, whichever is
 * earlier: after a suspension the wall clock's comes first. `refreshAt`: the pending
 * refresh timer's monotonic instant, if any.
 */
export function shownTimes (held: Token | undefined, refreshAt: number | undefined, toWallNow: number): Pick<TokenState, 'expiresAt' | 'refreshesAt'> {
  if (held === undefined) return { expiresAt: undefined, refreshesAt: undefined }
  const wallOf = (monotonic: number, wall: number): number => Math.min(Math.round(monotonic + toWallNow), Math.round(wall))
  return {
    expiresAt: wallOf(held.expiresAt, held.wallExpiresAt),
    refreshesAt: refreshAt === undefined ? undefined : wallOf(refreshAt, held.wallRefreshAt)
  }
}
