// The /status document: pure functions, no I/O. It tells an operator in one request
// where the token stands. It never carries the token nor a secret, nor a prefix or
// hash of either: credentials appear only as where they come from.
import type { Config } from '../config/load.js'
import { egressSummary } from '../egress/route.js'
import { redisDisplayUrl } from '../config/rate-limits.js'
import type { RateLimitStatus } from '../quota/guard.js'
import type { CachedStatus } from '../cache/read-cache.js'
import type { OverloadStatus } from '../overload/manager.js'
import type { IdempotencyStatus } from '../idempotency/stage.js'
import { credentialOrigin, type CredentialOrigin } from '../token/credentials.js'
import { tokenEndpointUrl, type TokenInfo } from '../token/token-client.js'
import type { TokenState } from '../token/token-manager.js'

/** The effective configuration, by variable name; credentials only as their origin. */
export interface ConfigSummary {
  readonly [variable: string]: string | number | boolean | CredentialOrigin
}

/**
 * A whitelist: a setting added to Config appears here only once someone decides it
 * may be shown. Credentials are reduced to the variable in use and the file's path.
 */
export function configSummary (config: Config): ConfigSummary {
  return Object.freeze({
    AUTH_URL: config.token.authUrl,
    tokenUrl: tokenEndpointUrl(config.token.authUrl),
    UPSTREAM_URL: config.upstream.url,
    // scheme://host:port only: an egress proxy URL may carry a password.
    ...egressSummary(config.egress, config),
    CLIENT_ID: credentialOrigin('CLIENT_ID', config.token.clientId),
    CLIENT_SECRET: credentialOrigin('CLIENT_SECRET', config.token.clientSecret),
    HOST: config.listener.host,
    PORT: config.listener.port,
    ADMIN_HOST: config.admin.host,
    ADMIN_PORT: config.admin.port,
    TOKEN_TIMEOUT_MS: config.token.timeoutMs,
    TOKEN_REFRESH_MARGIN_MS: config.token.refreshMarginMs,
    TOKEN_WAIT_MS: config.token.waitMs,
    UPSTREAM_TIMEOUT_MS: config.upstream.timeoutMs,
    SHUTDOWN_GRACE_MS: config.shutdown.graceMs,
    SHUTDOWN_DELAY_MS: config.shutdown.delayMs,
    MAX_HEADER_BYTES: config.listener.maxHeaderBytes,
    MAX_HEADER_COUNT: config.listener.maxHeaderCount,
    MAX_BODY_BYTES: config.listener.maxBodyBytes,
    HEADERS_TIMEOUT_MS: config.listener.headersTimeoutMs,
    REQUEST_TIMEOUT_MS: config.listener.requestTimeoutMs,
    KEEP_ALIVE_TIMEOUT_MS: config.listener.keepAliveTimeoutMs,
    IDLE_TIMEOUT_MS: config.listener.idleTimeoutMs,
    RATE_LIMITS: config.rateLimits.rulesSource ?? '',
    RATE_LIMIT_MAX_WAIT_MS: config.rateLimits.maxWaitMs,
    RATE_LIMIT_COOLDOWN_MS: config.rateLimits.cooldownMs,
    RATE_LIMIT_COOLDOWN_MAX_MS: config.rateLimits.cooldownMaxMs,
    // scheme://host:port only: the URL may carry a password.
    RATE_LIMIT_REDIS_URL: config.rateLimits.redisUrl === undefined ? '' : redisDisplayUrl(config.rateLimits.redisUrl),
    RATE_LIMIT_REDIS_TIMEOUT_MS: config.rateLimits.redisTimeoutMs,
    RATE_LIMIT_FLEET_SIZE: config.rateLimits.fleetSize === 0 ? '' : config.rateLimits.fleetSize,
    // As in effect: set, or the longest window + an hour; 0: no bound (also a declared fleet of one).
    RATE_LIMIT_ALONE_MAX_MS: config.rateLimits.aloneMaxMs,
    CACHE_MAX_BYTES: config.cache.maxBytes,
    CACHE_ENTRY_MAX_BYTES: config.cache.entryMaxBytes,
    CACHE_REDIS_MAX_BYTES: config.cache.redisMaxBytes,
    // '' when unset: the limit is then the cgroup's, shown under overload.
    MEMORY_LIMIT_BYTES: config.overload.memoryLimitBytes ?? '',
    MAX_IN_FLIGHT_REQUESTS: config.overload.maxInFlightRequests,
    MAX_CONNECTIONS: config.overload.maxConnections,
    ADMIN_MAX_CONNECTIONS: config.admin.maxConnections,
    ACCESS_LOG: config.listener.accessLog,
    STATUS_ENDPOINT: config.admin.statusEndpoint,
    STATUS_FROM: config.admin.statusFrom,
    LOG_LEVEL: config.log.level,
    STATE_DIR: config.stateDir ?? '',
    ALLOWED_ROUTES: config.policy.allowed?.map((route) => route.id).join('; ') ?? '',
    TEST_ORDERS: config.policy.testOrders
  })
}

export interface StatusInput {
  version: string
  /** Monotonic milliseconds since start. */
  uptimeMs: number
  /** Wall-clock unix ms, for the `time` field. */
  wallNow: number
  token: TokenState
  readiness: { ready: boolean, reason: string }
  config: ConfigSummary
  rateLimits?: RateLimitStatus
  cache?: CachedStatus
  overload?: OverloadStatus
  idempotency?: IdempotencyStatus
}

export interface StatusDocument {
  version: string
  time: string
  uptimeSeconds: number
  ready: boolean
  reason: string
  token: {
    state: 'held' | 'refreshing' | 'none' | 'fetching'
    held: boolean
    expiresAt: string | null
    refreshesAt: string | null
    generation: number | null
    details: TokenInfo
  }
  tokenRequests: {
    inFlight: boolean
    consecutiveFailures: number
    lastFailure: { outcome: string, reason: string | null, at: string | null } | null
    nextAttemptAt: string | null
    credentialsRejected: boolean
  }
  rateLimits?: RateLimitStatus
  /** The read cache, when a rule has cache=: its copies (paths without query values), never a body. */
  cache?: CachedStatus
  /** The memory limit, live memory, requests in flight and whether new ones are shed (overload.ts). */
  overload?: OverloadStatus
  /** Idempotent routes (src/idempotency/): rules and key counts, never a key or a body. */
  idempotency?: IdempotencyStatus
  config: ConfigSummary
}

const iso = (ms: number | undefined): string | null => ms === undefined ? null : new Date(ms).toISOString()

function tokenStateName (state: TokenState): StatusDocument['token']['state'] {
  if (state.hasValidToken) return state.refreshing ? 'refreshing' : 'held'
  return state.refreshing ? 'fetching' : 'none'
}

export function statusDocument ({ version, uptimeMs, wallNow, token, readiness, config, rateLimits, cache, overload, idempotency }: StatusInput): StatusDocument {
  return {
    version,
    time: new Date(wallNow).toISOString(),
    uptimeSeconds: Math.floor(uptimeMs / 1000),
    ready: readiness.ready,
    reason: readiness.reason,
    token: {
      state: tokenStateName(token),
      held: token.hasValidToken,
      expiresAt: iso(token.expiresAt),
      refreshesAt: iso(token.refreshesAt),
      generation: token.generation ?? null,
      details: { ...token.info }
    },
    tokenRequests: {
      inFlight: token.refreshing,
      consecutiveFailures: token.consecutiveFailures,
      lastFailure: token.lastFailure === undefined
        ? null
        : { outcome: token.lastFailure, reason: token.lastFailureReason ?? null, at: iso(token.lastFailureAt) },
      nextAttemptAt: iso(token.nextAttemptAt),
      credentialsRejected: token.credentialsRejected
    },
    ...(rateLimits === undefined ? {} : { rateLimits }),
    ...(cache === undefined ? {} : { cache }),
    ...(overload === undefined ? {} : { overload }),
    ...(idempotency === undefined ? {} : { idempotency }),
    config
  }
}
