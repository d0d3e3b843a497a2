import type { Logger } from 'pino'
import { systemClock, type Clock } from '../clock.js'
import { TokenUnavailableError } from '../http/errors.js'
import type { Metrics } from '../metrics.js'
import type { CredentialOrigin } from './credentials.js'
import { createRefusals, isRefusal } from './refusals.js'
import { AttemptTimer } from './attempt-timer.js'
import { backoffDelay, tokenTimes, type TokenTimes } from './schedule.js'
import { createSharedWait } from './shared-wait.js'
import { SingleFlight, type Sent } from './single-flight.js'
import { TokenRequestError, type FetchedToken, type TokenInfo } from './token-client.js'
import { RequestRecord, tokenState, type TokenState } from './token-status.js'

export { shownTimes, type TokenState } from './token-status.js'

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
  const { log, waitMs, clock = systemClock, forcedRefreshIntervalMs = FORCED_REFRESH_INTERVAL_MS } = options
  const keeper = createTokenKeeper({ ...options, clock })
  const waitForInflight = createSharedWait(clock, waitMs)
  let lastForcedAt = -Infinity

  /**
   * The current token, or the one an in-flight request is about to bring (after a
   * bounded wait). Rejects with TokenUnavailableError (503, Retry-After) otherwise.
   * With no usable token and nothing in flight, a request starts at once — unless a
   * retry after a failure is scheduled: then callers start no token request of their
   * own, but for at most one per DEMAND_RETRY_INTERVAL_MS.
   */
  async function get (): Promise<Token> {
    const valid = keeper.current()
    if (valid !== undefined) return valid
    if (keeper.stopped) throw keeper.unavailable()
    if (keeper.mayStartOnDemand()) void keeper.refresh()
    if (keeper.inflight !== undefined) {
      await waitForInflight(keeper.inflight)
      const fresh = keeper.current()
      if (fresh !== undefined) return fresh
    }
    throw keeper.unavailable()
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
    const held = keeper.current()
    if (held !== undefined && held.generation > rejectedGeneration) return true
    if (keeper.inflight !== undefined) return true
    if (held === undefined || held.generation !== rejectedGeneration || keeper.stopped) return false
    const now = clock.now()
    if (now - lastForcedAt < forcedRefreshIntervalMs) return false
    lastForcedAt = now
    // Stryker disable next-line StringLiteral: log wording
    log.warn({ generation: rejectedGeneration }, 'upstream answered 401 to the access token; fetching a new one, keeping this one until it arrives')
    void keeper.refresh()
    return true
  }

  /**
   * A usable token newer than `generation`: at once if one is held, else when the
   * in-flight request brings it. Resolves undefined when that request fails, none
   * is in flight, waitMs passes, or the manager is stopped. Never rejects.
   */
  async function renewed (afterGeneration: number): Promise<Token | undefined> {
    const newer = (): Token | undefined => {
      const held = keeper.current()
      return held !== undefined && held.generation > afterGeneration ? held : undefined
    }
    const now = newer()
    if (now !== undefined || keeper.inflight === undefined || keeper.stopped) return now
    await waitForInflight(keeper.inflight)
    return newer()
  }

  return {
    start (): Promise<void> { return keeper.refresh() },
    stop: keeper.stop,
    current: keeper.current,
    get,
    invalidate,
    renewed,
    state: keeper.state
  }
}

/**
 * The token manager's state: the one token, its single-flight requests, the pending
 * refresh or retry, the record of failures. Everything but the callers' bounded waits
 * and the upstream's 401s, which createTokenManager serves on top of it.
 */
function createTokenKeeper (options: TokenManagerOptions & { clock: Clock }) {
  const {
    fetchToken, log, metrics, refreshMarginMs, tokenUrl, clock,
    credentials = DEFAULT_CREDENTIALS,
    random = Math.random,
    rejectedRetryMs = REJECTED_RETRY_MS
  } = options

  let token: Token | undefined
  const requests = new SingleFlight(fetchToken, clock, { succeeded, failed })
  const timer = new AttemptTimer(clock, () => { void refresh() })
  const record = new RequestRecord()
  const refusals = createRefusals({ log, tokenUrl, credentials, rejectedRetryMs, random })
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
      if (wall >= token.wallRefreshAt && timer.kind !== 'retry') void refresh()
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
    if (timer.kind !== 'retry') void refresh()
  }

  /** Starts a token request unless one is in flight; single-flight by construction. */
  function refresh (): Promise<void> {
    if (requests.inflight !== undefined) return requests.inflight
    if (stopped) return Promise.resolve()
    timer.clear()
    return requests.send()
  }

  function succeeded (fetched: FetchedToken, sent: Sent): void {
    const now = clock.now()
    const times = tokenTimes(sent.sentAt, fetched.lifetimeMs, refreshMarginMs, random())
    const toWallAtSend = sent.sentWallAt - sent.sentAt
    if (times.usableUntil <= now || times.usableUntil + toWallAtSend <= clock.wallNow()) {
      failed(new TokenRequestError('invalid_response', 'token expired before its answer arrived'), sent.sentAt)
      return
    }
    meterRequest('success', sent.sentAt)
    // Single-flight: no token newer than this request's can be held, so the answer always replaces it.
    token = tokenFrom(fetched, times, toWallAtSend, sent.generation)
    refusals.accepted()
    record.succeeded()
    metrics.tokenExpiry.set(token.wallExpiresAt / 1000)
    log.info({ generation: sent.generation, expiresInS: Math.round((times.expiresAt - now) / 1000), refreshInS: Math.round((times.refreshAt - now) / 1000) }, 'access token acquired')
    if (!stopped) timer.schedule(Math.max(0, times.refreshAt - now), 'refresh')
  }

  function failed (err: unknown, sentAt: number): void {
    const error = requestError(err)
    meterRequest(error.outcome, sentAt)
    record.failed(error, clock.now(), clock.wallNow())
    let delayMs: number
    if (isRefusal(error.outcome)) {
      delayMs = refusals.refused(error)
    } else {
      refusals.interrupted()
      delayMs = Math.max(Math.min(error.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS), backoffDelay(record.failures, random()))
      log.warn({ url: tokenUrl, outcome: error.outcome, statusCode: error.statusCode, oauthError: error.oauthError, reason: error.message, failures: record.failures, retryInMs: delayMs },
        'token request failed')
    }
    if (!stopped) timer.schedule(delayMs, 'retry')
  }

  function meterRequest (outcome: string, sentAt: number): void {
    metrics.tokenRequests.inc({ outcome })
    metrics.tokenRequestDuration.observe((clock.now() - sentAt) / 1000)
  }

  /**
   * Whether a caller that finds no usable token may start a request: yes unless a retry
   * after a failure is scheduled, then at most one per DEMAND_RETRY_INTERVAL_MS.
   */
  function mayStartOnDemand (): boolean {
    if (timer.kind !== 'retry') return true
    const { lastFailure } = record
    // Refused credentials (the endpoint's or the egress proxy's) and a Retry-After: wait them out.
    if (lastFailure === undefined || refusals.inRun() || lastFailure.retryAfterMs !== undefined) return false
    const now = clock.now()
    return now - record.lastFailedAt >= DEMAND_RETRY_INTERVAL_MS && (timer.nextAttemptAt ?? 0) - now > DEMAND_RETRY_INTERVAL_MS
  }

  function unavailable (): Error {
    const { nextAttemptAt } = timer
    const waitS = nextAttemptAt === undefined ? 1 : Math.ceil((nextAttemptAt - clock.now()) / 1000)
    return Object.assign(new TokenUnavailableError(), { retryAfterSeconds: Math.max(1, waitS) })
  }

  function state (): TokenState {
    const held = current()
    const toWallNow = clock.wallNow() - clock.now()
    return tokenState({ held, toWallNow, timer, refreshing: requests.inflight !== undefined, record, credentialsRejected: refusals.credentialsRejected() })
  }

  function stop (): void {
    stopped = true
    timer.clear()
  }

  return {
    current,
    refresh,
    stop,
    state,
    unavailable,
    mayStartOnDemand,
    /** The token request in flight, if any. */
    get inflight (): Promise<void> | undefined { return requests.inflight },
    get stopped (): boolean { return stopped }
  }
}

export type TokenManager = ReturnType<typeof createTokenManager>

/** The token a request brought, its instants carried to the wall clock as read when it was sent. */
function tokenFrom (fetched: FetchedToken, times: TokenTimes, toWallAtSend: number, generation: number): Token {
  return Object.freeze({
    authorization: `Bearer ${fetched.accessToken}`,
    expiresAt: times.expiresAt,
    usableUntil: times.usableUntil,
    refreshAt: times.refreshAt,
    wallExpiresAt: times.expiresAt + toWallAtSend,
    wallUsableUntil: times.usableUntil + toWallAtSend,
    wallRefreshAt: times.refreshAt + toWallAtSend,
    generation,
    info: Object.freeze({ ...fetched.info })
  })
}

/** A failed request's error as the manager records it: a TokenRequestError, whatever was thrown. */
function requestError (err: unknown): TokenRequestError {
  // Stryker disable next-line ObjectLiteral: the cause is kept for a debugger; the log and /status show the outcome and message
  return err instanceof TokenRequestError ? err : new TokenRequestError('network_error', `token request failed unexpectedly (${kindOf(err)})`, { cause: err })
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
