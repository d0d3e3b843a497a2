import type { Logger } from 'pino'
import { systemClock, type Clock } from '../clock.js'
import { TokenUnavailableError } from '../errors.js'
import type { Metrics } from '../metrics.js'
import { backoffDelay, tokenTimes } from './schedule.js'
import { TokenRequestError, type FetchedToken } from './token-client.js'

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

export interface Token {
  /** `Bearer <access_token>`: RFC 6750 spelling, whatever token_type the endpoint answered. */
  readonly authorization: string
  readonly expiresAt: number
  readonly usableUntil: number
  /** Increases with every token request; a 401 invalidates a token only if it is still the current one. */
  readonly generation: number
}

export interface TokenManagerOptions {
  fetchToken: () => Promise<FetchedToken>
  log: Logger
  metrics: Pick<Metrics, 'tokenRequests' | 'tokenRequestDuration' | 'tokenExpiry'>
  refreshMarginMs: number
  /** How long a caller waits for an in-flight token request before getting 503. */
  waitMs: number
  clock?: Clock
  random?: () => number
  rejectedRetryMs?: number
  forcedRefreshIntervalMs?: number
}

export interface TokenState {
  hasValidToken: boolean
  expiresAt: number | undefined
  everHadToken: boolean
  credentialsRejected: boolean
  consecutiveFailures: number
  lastFailure: string | undefined
  nextAttemptAt: number | undefined
}

/**
 * Keeps the one access token: fetched at start, refreshed ahead of expiry on a
 * timer that does not depend on traffic, retried with backoff, never sent once
 * expired (contract §5.5). At most one token request is ever in flight.
 */
export function createTokenManager (options: TokenManagerOptions) {
  const {
    fetchToken, log, metrics, refreshMarginMs, waitMs,
    clock = systemClock,
    random = Math.random,
    rejectedRetryMs = REJECTED_RETRY_MS,
    forcedRefreshIntervalMs = FORCED_REFRESH_INTERVAL_MS
  } = options

  let token: Token | undefined
  let inflight: Promise<void> | undefined
  let boundedWait: Promise<void> | undefined
  let cancelTimer: (() => void) | undefined
  let nextAttemptAt: number | undefined
  let generation = 0
  let failures = 0
  let lastFailure: TokenRequestError | undefined
  let everHadToken = false
  let credentialsRejected = false
  /** The rejection that started the current run of rejections, if any. */
  let lastRejected: TokenRequestError | undefined
  let lastForcedAt = -Infinity
  let lastFailedAt = -Infinity
  let stopped = false

  /** The token if it may still be sent now; a synchronous check for the hot path. */
  function current (): Token | undefined {
    return token !== undefined && clock.now() < token.usableUntil ? token : undefined
  }

  function schedule (delayMs: number): void {
    cancelTimer?.()
    nextAttemptAt = clock.now() + delayMs
    cancelTimer = clock.setTimer(() => {
      cancelTimer = undefined
      void refresh()
    }, delayMs)
  }

  /** Starts a token request unless one is in flight; single-flight by construction. */
  function refresh (): Promise<void> {
    if (inflight !== undefined) return inflight
    if (stopped) return Promise.resolve()
    cancelTimer?.()
    cancelTimer = undefined
    nextAttemptAt = undefined
    const requestGeneration = ++generation
    const sentAt = clock.now()
    const attempt = fetchToken().then(
      (fetched) => { succeeded(fetched, requestGeneration, sentAt) },
      (err: unknown) => { failed(err, sentAt) }
    )
    inflight = attempt.finally(() => { inflight = undefined })
    return inflight
  }

  function succeeded (fetched: FetchedToken, requestGeneration: number, sentAt: number): void {
    const now = clock.now()
    const times = tokenTimes(sentAt, fetched.lifetimeMs, refreshMarginMs, random())
    if (times.usableUntil <= now) {
      failed(new TokenRequestError('invalid_response', 'token expired before its answer arrived'), sentAt)
      return
    }
    record('success', sentAt)
    // An answer to an older request never replaces a newer token.
    if (token !== undefined && token.generation > requestGeneration) return
    token = Object.freeze({
      authorization: `Bearer ${fetched.accessToken}`,
      expiresAt: times.expiresAt,
      usableUntil: times.usableUntil,
      generation: requestGeneration
    })
    if (credentialsRejected) log.info('token endpoint accepts the client credentials again')
    failures = 0
    lastFailure = undefined
    lastRejected = undefined
    everHadToken = true
    credentialsRejected = false
    metrics.tokenExpiry.set(times.expiresAt / 1000)
    log.info({ generation: requestGeneration, expiresInS: Math.round((times.expiresAt - now) / 1000), refreshInS: Math.round((times.refreshAt - now) / 1000) }, 'access token acquired')
    if (!stopped) schedule(Math.max(0, times.refreshAt - now))
  }

  function failed (err: unknown, sentAt: number): void {
    const error = err instanceof TokenRequestError
      ? err
      : new TokenRequestError('network_error', 'token request failed unexpectedly', { cause: err })
    record(error.outcome, sentAt)
    failures += 1
    lastFailure = error
    lastFailedAt = clock.now()
    let delayMs: number
    if (error.outcome === 'rejected' && lastRejected === undefined) {
      // The first rejection is retried at once: a request sent just before a secret
      // was rotated in place carries the old secret, and the retry reads the new one.
      lastRejected = error
      delayMs = backoffDelay(1, random())
      log.warn({ oauthError: error.oauthError, statusCode: error.statusCode, retryInMs: delayMs },
        'token endpoint rejected the client credentials; retrying once with the credentials read again')
    } else if (error.outcome === 'rejected') {
      delayMs = rejectedRetryMs
      // One clear ERROR per incident; the retries that follow are only debug noise.
      if (!credentialsRejected) {
        log.error({ oauthError: error.oauthError, statusCode: error.statusCode, retryInMs: delayMs },
          'token endpoint rejected the client credentials; check CLIENT_ID and CLIENT_SECRET')
      } else {
        log.debug({ oauthError: error.oauthError, retryInMs: delayMs }, 'client credentials still rejected')
      }
      credentialsRejected = true
    } else {
      lastRejected = undefined
      delayMs = Math.max(Math.min(error.retryAfterMs ?? 0, MAX_RETRY_AFTER_MS), backoffDelay(failures, random()))
      log.warn({ outcome: error.outcome, statusCode: error.statusCode, oauthError: error.oauthError, reason: error.message, failures, retryInMs: delayMs },
        'token request failed')
    }
    if (!stopped) schedule(delayMs)
  }

  function record (outcome: string, sentAt: number): void {
    metrics.tokenRequests.inc({ outcome })
    metrics.tokenRequestDuration.observe((clock.now() - sentAt) / 1000)
  }

  /** Waits for the in-flight request, but never longer than waitMs; shared by all waiting callers. */
  function waitForInflight (running: Promise<void>): Promise<void> {
    if (boundedWait === undefined) {
      let cancel = (): void => {}
      boundedWait = new Promise<void>((resolve) => {
        cancel = clock.setTimer(resolve, waitMs)
        void running.then(resolve)
      }).finally(() => {
        cancel()
        boundedWait = undefined
      })
    }
    return boundedWait
  }

  /** Whether a waiting caller may start the scheduled attempt now (see DEMAND_RETRY_INTERVAL_MS). */
  function demandMayRetry (): boolean {
    // Wrong credentials and a Retry-After are the endpoint's own word: wait them out.
    if (lastFailure === undefined || lastFailure.outcome === 'rejected' || lastFailure.retryAfterMs !== undefined) return false
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
   * While a retry is scheduled, callers start no token request of their own, but
   * for at most one per DEMAND_RETRY_INTERVAL_MS.
   */
  async function get (): Promise<Token> {
    const valid = current()
    if (valid !== undefined) return valid
    if (stopped) throw unavailable()
    if (inflight === undefined && (cancelTimer === undefined || demandMayRetry())) void refresh()
    if (inflight !== undefined) {
      await waitForInflight(inflight)
      const fresh = current()
      if (fresh !== undefined) return fresh
    }
    throw unavailable()
  }

  /**
   * Called when the upstream rejected `rejectedGeneration` (401). Drops that token
   * and starts a refresh if it is still the current one and no forced refresh ran
   * recently. Returns whether a retry with get() may bring a different token.
   */
  function invalidate (rejectedGeneration: number): boolean {
    if (token === undefined || token.generation !== rejectedGeneration) return true
    const now = clock.now()
    if (now - lastForcedAt < forcedRefreshIntervalMs) return false
    lastForcedAt = now
    log.warn({ generation: rejectedGeneration }, 'upstream rejected the access token; fetching a new one')
    token = undefined
    metrics.tokenExpiry.set(0)
    void refresh()
    return true
  }

  function state (): TokenState {
    return {
      hasValidToken: current() !== undefined,
      expiresAt: token?.expiresAt,
      everHadToken,
      credentialsRejected,
      consecutiveFailures: failures,
      lastFailure: lastFailure?.outcome,
      nextAttemptAt
    }
  }

  return {
    start (): Promise<void> { return refresh() },
    stop (): void {
      stopped = true
      cancelTimer?.()
      cancelTimer = undefined
      nextAttemptAt = undefined
    },
    current,
    get,
    invalidate,
    state
  }
}

export type TokenManager = ReturnType<typeof createTokenManager>
