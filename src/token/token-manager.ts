import type { Logger } from 'pino'
import { systemClock, type Clock } from '../clock.js'
import { TokenUnavailableError } from '../errors.js'
import type { Metrics } from '../metrics.js'
import type { CredentialOrigin } from './credentials.js'
import { createRefusals, isRefusal } from './refusals.js'
import { backoffDelay, tokenTimes } from './schedule.js'
import { createSharedWait } from './shared-wait.js'
import { TokenRequestError, type FetchedToken, type TokenInfo } from './token-client.js'

/** After the endpoint says the credentials are wrong, retry this slowly: the secret may be rotated. */
export const REJECTED_RETRY_MS = 60_000
/** A Retry-After longer than this is not waited out in full. */
export const MAX_RETRY_AFTER_MS = 5 * 60_000
/** At most one refresh forced by an upstream 401 per interval, so a broken upstream cannot cause a token storm. */
export const FORCED_REFRESH_INTERVAL_MS = 10_000
/**
 * While callers are waiting for a token and none is held, one of them may start the
 * next attempt early, at most this often: the sidecar recovers within seconds when
 * the endpoint comes back, however far the backoff has grown, while failing callers
 * add at most one token request per interval.
 */
export const DEMAND_RETRY_INTERVAL_MS = 2_000

/**
 * Instants are on the injected clock's monotonic scale (Clock.now): a wall-clock
 * step can neither shorten nor stretch a token's life. The wall-clock twins are what
 * the wall clock read at the same moments; they serve display and the second expiry
 * check (see current()).
 */
export interface Token {
  /** `Bearer <access_token>`: RFC 6750 spelling, whatever token_type the endpoint answered. */
  readonly authorization: string
  /** Monotonic: when the gateway considers the token expired, counted from when its request was sent. */
  readonly expiresAt: number
  /** Monotonic: the last instant the token is sent upstream (contract §5.5). */
  readonly usableUntil: number
  /** Monotonic: when the background refresh is due. */
  readonly refreshAt: number
  /** Wall clock (unix ms) at the same three moments, as read when the token was requested. */
  readonly wallExpiresAt: number
  readonly wallUsableUntil: number
  readonly wallRefreshAt: number
  /** Increases with every token request; a 401 concerns a token only if it is still the current one. */
  readonly generation: number
  /** The answer's non-secret fields, for /status. */
  readonly info: TokenInfo
}

export interface TokenManagerOptions {
  fetchToken: () => Promise<FetchedToken>
  log: Logger
  metrics: Pick<Metrics, 'tokenRequests' | 'tokenRequestDuration' | 'tokenExpiry'>
  refreshMarginMs: number
  /** How long a caller waits for an in-flight token request before getting 503. */
  waitMs: number
  /** The token endpoint's URL, named in failure logs (it carries no credential). */
  tokenUrl?: string
  /** Where the credentials come from, so that messages name the variables actually in use. */
  credentials?: { clientId: CredentialOrigin, clientSecret: CredentialOrigin }
  clock?: Clock
  random?: () => number
  rejectedRetryMs?: number
  forcedRefreshIntervalMs?: number
}

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

const DEFAULT_CREDENTIALS: NonNullable<TokenManagerOptions['credentials']> = {
  clientId: { variable: 'CLIENT_ID' }, clientSecret: { variable: 'CLIENT_SECRET' }
}

/**
 * Keeps the one access token: fetched at start, refreshed ahead of expiry on a
 * timer that does not depend on traffic, retried with backoff, never sent once
 * expired (contract §5.5). At most one token request is ever in flight.
 *
 * Lifetimes are measured on the monotonic clock, so a wall-clock step (NTP, an
 * operator) changes nothing. A token also lapses once the *wall* clock says it
 * has expired, whichever comes first: while a VM or process is suspended the
 * monotonic clock (and every timer) stands still, but the gateway's time runs on,
 * so only the wall clock knows the token is gone. The price of that second check
 * is one early token request after a forward step; the gain is never sending a
 * token that expired during a suspension. Whenever no usable token is held and no
 * request is in flight, a request starts at once, unless a retry after a real
 * failure is pending (its backoff is the endpoint's protection).
 */
export function createTokenManager (options: TokenManagerOptions) {
  const {
    fetchToken, log, metrics, refreshMarginMs, waitMs, tokenUrl,
    credentials = DEFAULT_CREDENTIALS,
    clock = systemClock,
    random = Math.random,
    rejectedRetryMs = REJECTED_RETRY_MS,
    forcedRefreshIntervalMs = FORCED_REFRESH_INTERVAL_MS
  } = options

  let token: Token | undefined
  let inflight: Promise<void> | undefined
  const waitForInflight = createSharedWait(clock, waitMs)
  let cancelTimer: (() => void) | undefined
  /** What the pending timer is for: the refresh ahead of expiry, or a retry after a failure. */
  let timerKind: 'refresh' | 'retry' | undefined
  let nextAttemptAt: number | undefined
  let generation = 0
  let failures = 0
  let lastFailure: TokenRequestError | undefined
  let everHadToken = false
  const refusals = createRefusals({ log, tokenUrl, credentials, rejectedRetryMs, random })
  let lastForcedAt = -Infinity
  // Stryker disable next-line UnaryOperator: read only after a failure has set it (demandMayRetry checks lastFailure first)
  let lastFailedAt = -Infinity
  let lastFailedWallAt: number | undefined
  let stopped = false

  /**
   * The token if it may still be sent now; a synchronous check for the hot path,
   * made at every use, so a timer that fires late never leaves a lapsed token in use.
   */
  function current (): Token | undefined {
    if (token === undefined) return undefined
    const wall = clock.wallNow()
    if (clock.now() < token.usableUntil && wall < token.wallUsableUntil) {
      // After a suspension the refresh timer runs late: refresh when the wall clock says it is time
      // (refresh() itself does nothing while a request is in flight or once stopped).
      if (wall >= token.wallRefreshAt && timerKind !== 'retry') void refresh()
      return token
    }
    lapsed(token)
    return undefined
  }

  /** The held token can no longer be sent: drop it and, if nothing else will, fetch a new one now. */
  function lapsed (old: Token): void {
    token = undefined
    metrics.tokenExpiry.set(0)
    const byWall = clock.now() < old.usableUntil
    log.warn({ generation: old.generation, judgedBy: byWall ? 'wall clock' : 'monotonic clock' },
      // Stryker disable next-line StringLiteral: log wording (the fields above are what tests and operators read)
      'access token lapsed before a new one arrived')
    if (timerKind !== 'retry') void refresh()
  }

  function schedule (delayMs: number, kind: 'refresh' | 'retry'): void {
    cancelTimer?.()
    nextAttemptAt = clock.now() + delayMs
    timerKind = kind
    cancelTimer = clock.setTimer(() => {
      cancelTimer = undefined
      timerKind = undefined
      void refresh()
    }, delayMs)
  }

  /** Starts a token request unless one is in flight; single-flight by construction. */
  function refresh (): Promise<void> {
    if (inflight !== undefined) return inflight
    if (stopped) return Promise.resolve()
    cancelTimer?.()
    cancelTimer = undefined
    timerKind = undefined
    nextAttemptAt = undefined
    const requestGeneration = ++generation
    const sentAt = clock.now()
    const sentWallAt = clock.wallNow()
    const attempt = fetchToken().then(
      (fetched) => { succeeded(fetched, requestGeneration, sentAt, sentWallAt) },
      (err: unknown) => { failed(err, sentAt) }
    )
    inflight = attempt.finally(() => { inflight = undefined })
    return inflight
  }

  function succeeded (fetched: FetchedToken, requestGeneration: number, sentAt: number, sentWallAt: number): void {
    const now = clock.now()
    const times = tokenTimes(sentAt, fetched.lifetimeMs, refreshMarginMs, random())
    const toWallAtSend = sentWallAt - sentAt
    if (times.usableUntil <= now || times.usableUntil + toWallAtSend <= clock.wallNow()) {
      failed(new TokenRequestError('invalid_response', 'token expired before its answer arrived'), sentAt)
      return
    }
    record('success', sentAt)
    // Single-flight: no token newer than this request's can be held, so the answer always replaces it.
    token = Object.freeze({
      authorization: `Bearer ${fetched.accessToken}`,
      expiresAt: times.expiresAt,
      usableUntil: times.usableUntil,
      refreshAt: times.refreshAt,
      wallExpiresAt: times.expiresAt + toWallAtSend,
      wallUsableUntil: times.usableUntil + toWallAtSend,
      wallRefreshAt: times.refreshAt + toWallAtSend,
      generation: requestGeneration,
      info: Object.freeze({ ...fetched.info })
    })
    refusals.accepted()
    failures = 0
    lastFailure = undefined
    lastFailedWallAt = undefined
    everHadToken = true
    metrics.tokenExpiry.set(token.wallExpiresAt / 1000)
    log.info({ generation: requestGeneration, expiresInS: Math.round((times.expiresAt - now) / 1000), refreshInS: Math.round((times.refreshAt - now) / 1000) }, 'access token acquired')
    if (!stopped) schedule(Math.max(0, times.refreshAt - now), 'refresh')
  }

  function failed (err: unknown, sentAt: number): void {
    // Stryker disable next-line ObjectLiteral: the cause is kept for a debugger; the log and /status show the outcome and message
    const error = err instanceof TokenRequestError ? err : new TokenRequestError('network_error', `token request failed unexpectedly (${kindOf(err)})`, { cause: err })
    record(error.outcome, sentAt)
    failures += 1
    lastFailure = error
    lastFailedAt = clock.now()
    lastFailedWallAt = clock.wallNow()
    let delayMs: number
    if (isRefusal(error.outcome)) {
      delayMs = refusals.refused(error)
    } else {
      refusals.interrupted()
      delayMs = Math.max(Math.min(error.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS), backoffDelay(failures, random()))
      log.warn({ url: tokenUrl, outcome: error.outcome, statusCode: error.statusCode, oauthError: error.oauthError, reason: error.message, failures, retryInMs: delayMs },
        'token request failed')
    }
    if (!stopped) schedule(delayMs, 'retry')
  }

  function record (outcome: string, sentAt: number): void {
    metrics.tokenRequests.inc({ outcome })
    metrics.tokenRequestDuration.observe((clock.now() - sentAt) / 1000)
  }

  /** Whether a waiting caller may start the scheduled retry now (see DEMAND_RETRY_INTERVAL_MS). */
  function demandMayRetry (): boolean {
    // Refused credentials (the endpoint's or the proxy's) and a Retry-After: wait them out.
    if (lastFailure === undefined || refusals.inRun() || lastFailure.retryAfterMs !== undefined) return false
    const now = clock.now()
    return now - lastFailedAt >= DEMAND_RETRY_INTERVAL_MS && (nextAttemptAt ?? 0) - now > DEMAND_RETRY_INTERVAL_MS
  }

  function unavailable (): Error {
    const waitS = nextAttemptAt === undefined ? 1 : Math.ceil((nextAttemptAt - clock.now()) / 1000)
    return Object.assign(new TokenUnavailableError(), { retryAfterSeconds: Math.max(1, waitS) })
  }

  /**
   * The current token, or the one an in-flight request is about to bring (after a
   * bounded wait). Rejects with TokenUnavailableError (503, Retry-After) otherwise.
   * With no usable token and nothing in flight, a request starts at once — unless a
   * retry after a failure is scheduled: then callers start no token request of their
   * own, but for at most one per DEMAND_RETRY_INTERVAL_MS.
   */
  async function get (): Promise<Token> {
    const valid = current()
    if (valid !== undefined) return valid
    if (stopped) throw unavailable()
    if (timerKind !== 'retry' || demandMayRetry()) void refresh()
    if (inflight !== undefined) {
      await waitForInflight(inflight)
      const fresh = current()
      if (fresh !== undefined) return fresh
    }
    throw unavailable()
  }

  /**
   * The upstream answered 401 to a request sent with token `rejectedGeneration`.
   * Apigee also answers 401 for reasons that are not the token's (an API the app is
   * not subscribed to), so the held token is kept: it is replaced only when a new
   * one has arrived. If it is still the current one and no forced refresh ran within
   * FORCED_REFRESH_INTERVAL_MS, a refresh starts (single-flight). Returns whether a
   * replay may bring a different token: a newer one is held, or a request is in
   * flight or was just started. renewed() then gives it.
   */
  function invalidate (rejectedGeneration: number): boolean {
    const held = current()
    if (held !== undefined && held.generation > rejectedGeneration) return true
    if (inflight !== undefined) return true
    if (held === undefined || held.generation !== rejectedGeneration || stopped) return false
    const now = clock.now()
    if (now - lastForcedAt < forcedRefreshIntervalMs) return false
    lastForcedAt = now
    // Stryker disable next-line StringLiteral: log wording
    log.warn({ generation: rejectedGeneration }, 'upstream answered 401 to the access token; fetching a new one, keeping this one until it arrives')
    void refresh()
    return true
  }

  /**
   * A usable token newer than `generation`: at once if one is held, else when the
   * in-flight request brings it. Resolves undefined when that request fails, none
   * is in flight, waitMs passes, or the manager is stopped. Never rejects.
   */
  async function renewed (afterGeneration: number): Promise<Token | undefined> {
    const newer = (): Token | undefined => {
      const held = current()
      return held !== undefined && held.generation > afterGeneration ? held : undefined
    }
    const now = newer()
    if (now !== undefined || inflight === undefined || stopped) return now
    await waitForInflight(inflight)
    return newer()
  }

  function state (): TokenState {
    const held = current()
    // One reading of the clocks for every time shown, so they agree with each other.
    const toWallNow = clock.wallNow() - clock.now()
    const shown = shownTimes(held, timerKind === 'refresh' ? nextAttemptAt : undefined, toWallNow)
    return {
      hasValidToken: held !== undefined,
      ...shown,
      generation: held?.generation,
      info: held?.info,
      refreshing: inflight !== undefined,
      everHadToken,
      credentialsRejected: refusals.credentialsRejected(),
      consecutiveFailures: failures,
      lastFailure: lastFailure?.outcome,
      lastFailureReason: lastFailure?.message,
      lastFailureAt: lastFailedWallAt,
      // The refresh pending is one instant, shown once: as refreshesAt, which the wall clock may bring forward.
      nextAttemptAt: shown.refreshesAt ?? (nextAttemptAt === undefined ? undefined : Math.round(nextAttemptAt + toWallNow))
    }
  }

  function stop (): void {
    stopped = true
    cancelTimer?.()
    cancelTimer = undefined
    timerKind = undefined
    nextAttemptAt = undefined
  }

  return {
    start (): Promise<void> { return refresh() },
    stop,
    current,
    get,
    invalidate,
    renewed,
    state
  }
}

export type TokenManager = ReturnType<typeof createTokenManager>

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

/**
 * What an unexpected failure was, said without its message: a message may quote the token
 * endpoint's answer (a JSON parser's does), so only the error's class and code are told.
 */
export function kindOf (err: unknown): string {
  if (!(err instanceof Error)) return typeof err
  const name = IDENTIFIER.test(err.name) ? err.name : 'Error'
  const code: unknown = (err as NodeJS.ErrnoException).code
  return typeof code === 'string' && IDENTIFIER.test(code) ? `${name} ${code}` : name
}
const IDENTIFIER = /^[A-Za-z_]\w{0,63}$/
