import { loadEgressProxy, type EgressProxy } from './egress-proxy.js'
import { BAD_ESCAPE, userInfo } from './url-credentials.js'
import { checkRateLimits, type RateLimitConfig } from './rate-limits.js'
import { checkCredential, type CredentialSource } from './credentials.js'
import { listenerProblems } from './listeners.js'
import { ConfigError, defaultReadFileSync, parseEnv, schemaProblems, type Env, type ReadFileSync } from './parse-env.js'
import { MIN_MEMORY_LIMIT_BYTES, schema, type LogFormat, type LogLevel, type RawEnv, type StatusFrom } from './schema.js'
import { checkBaseUrl, checkUrl, TOKEN_PATH } from './urls.js'
import { checkOrders, type RoutePolicy } from './orders.js'
import { loadTracing, type TracingConfig } from './tracing.js'

/** The proxy listener, where callers come in: its address and what a caller may send, and how slowly. */
export interface ListenerConfig {
  readonly host: string
  readonly port: number
  /** Largest request head (request line and headers) accepted; larger answers 431. */
  readonly maxHeaderBytes: number
  /** Most header fields a request may carry; more answers 431 (Node alone would drop the rest silently). */
  readonly maxHeaderCount: number
  /** Largest request body forwarded; 0 for no limit. Larger answers 413. */
  readonly maxBodyBytes: number
  /** A caller must send the whole request head within this (slowloris). */
  readonly headersTimeoutMs: number
  /** A caller must send the whole request, body included, within this. */
  readonly requestTimeoutMs: number
  /** An idle keep-alive connection from a caller is closed after this. */
  readonly keepAliveTimeoutMs: number
  /** A connection with no traffic either way for this long is closed (a caller that stopped reading). */
  readonly idleTimeoutMs: number
  readonly accessLog: boolean
}

/** TI's store API, where requests are forwarded, and the pool's queue in front of it. */
export interface UpstreamConfig {
  /** UPSTREAM_URL, without a trailing slash. */
  readonly url: string
  readonly timeoutMs: number
  /** How long a request may wait for a connection to the upstream before 503 UPSTREAM_BUSY. */
  readonly queueTimeoutMs: number
  /** How many requests may wait for a connection to the upstream; more get 503 UPSTREAM_BUSY at once. */
  readonly queueLimit: number
}

/** The token endpoint, the credentials sent to it, and the token's lifetime rules. */
export interface TokenConfig {
  /** AUTH_URL, without a trailing slash (the token path is appended to it). */
  readonly authUrl: string
  readonly clientId: CredentialSource
  readonly clientSecret: CredentialSource
  readonly timeoutMs: number
  readonly refreshMarginMs: number
  readonly waitMs: number
}

/** What the overload manager sheds on (src/overload/). */
export interface OverloadConfig {
  /** MEMORY_LIMIT_BYTES: the limit shed before; 0 for none; undefined: the cgroup's (memory-limit.ts). */
  readonly memoryLimitBytes: number | undefined
  /** New requests beyond this many in flight get 503 OVERLOADED; 0 for no cap. */
  readonly maxInFlightRequests: number
  /** New connections to the proxy listener beyond this many open get 503 OVERLOADED and are closed; 0 for no bound. */
  readonly maxConnections: number
}

/** The admin listener: probes, /metrics and /status. */
export interface AdminConfig {
  readonly host: string
  readonly port: number
  /** New admin connections beyond this many open get 503 and are closed (src/admin/server.ts). */
  readonly maxConnections: number
  /** Serve /status (STATUS_ENDPOINT); false: it answers 404, probes and /metrics stay. */
  readonly statusEndpoint: boolean
  /** STATUS_FROM: `loopback` answers /status 403 to any other peer. */
  readonly statusFrom: StatusFrom
}

/** The read cache of rules with cache= (src/cache/). */
export interface CacheConfig {
  /** CACHE_MAX_BYTES: the copies in this sidecar's memory, at most. */
  readonly maxBytes: number
  /** CACHE_ENTRY_MAX_BYTES: a larger answer is passed on as it comes, not stored. */
  readonly entryMaxBytes: number
  /** CACHE_REDIS_MAX_BYTES: the copies in the fleet's Redis, at most; 0: none kept there. */
  readonly redisMaxBytes: number
}

export interface ShutdownConfig {
  readonly graceMs: number
  readonly delayMs: number
}

export interface LogConfig {
  readonly level: LogLevel
  /** LOG_FORMAT: `auto` is `pretty` when stdout is a terminal (src/cli/exit.ts), else `json`. */
  readonly format: LogFormat
}

/** Every setting, in one section per part of the sidecar that reads it. */
export interface Config {
  readonly listener: ListenerConfig
  readonly upstream: UpstreamConfig
  readonly token: TokenConfig
  readonly overload: OverloadConfig
  readonly admin: AdminConfig
  readonly rateLimits: RateLimitConfig
  readonly cache: CacheConfig
  /** HTTPS_PROXY, HTTP_PROXY, NO_PROXY (src/config/egress-proxy.ts). */
  readonly egress: EgressProxy
  readonly shutdown: ShutdownConfig
  readonly log: LogConfig
  /** ALLOWED_ROUTES and TEST_ORDERS (src/policy/). */
  readonly policy: RoutePolicy
  /** STATE_DIR: a directory for durable state (idempotency keys under idempotency/, the quota ledger under quota/); undefined: none. */
  readonly stateDir: string | undefined
  /** OpenTelemetry tracing (OTEL_*, src/config/tracing.ts); undefined: off. */
  readonly tracing: TracingConfig | undefined
}

/**
 * Validates the environment and returns a frozen Config. Every problem is
 * reported at once in a ConfigError; no message ever contains a credential.
 */
export function loadConfig (env: Env, readFile: ReadFileSync = defaultReadFileSync): Config {
  const problems: string[] = []
  let raw: RawEnv
  let typed = true
  try {
    raw = parseEnv(schema, env)
  } catch (err) {
    typed = false
    problems.push(...schemaProblems(err))
    // Keep checking what can be checked so that one run names every problem.
    raw = { ...env } as unknown as RawEnv
  }

  const { authUrl, upstreamUrl } = checkBaseUrls(raw, problems)
  const clientId = checkCredential('CLIENT_ID', raw.CLIENT_ID, raw.CLIENT_ID_FILE, readFile, problems)
  const clientSecret = checkCredential('CLIENT_SECRET', raw.CLIENT_SECRET, raw.CLIENT_SECRET_FILE, readFile, problems)
  if (typed) problems.push(...crossFieldProblems(raw))
  const rateLimits = checkRateLimits(raw, typed, readFile, problems)
  if (rateLimits?.redisUrl !== undefined && userInfo(new URL(rateLimits.redisUrl)) === undefined) {
    // ioredis decodes the user and password itself and would throw at start.
    problems.push(`${raw.RATE_LIMIT_REDIS_URL === undefined ? 'RATE_LIMIT_REDIS_URL_FILE' : 'RATE_LIMIT_REDIS_URL'}: ${BAD_ESCAPE}`)
  }
  const egressProxy = loadEgressProxy(env, problems)
  const orders = checkOrders(raw, problems)
  const tracing = loadTracing(env, problems)

  if (problems.length > 0 || authUrl === undefined || upstreamUrl === undefined ||
      clientId === undefined || clientSecret === undefined || rateLimits === undefined) {
    throw new ConfigError(problems)
  }

  return Object.freeze({
    listener: Object.freeze({
      host: raw.HOST,
      port: raw.PORT,
      maxHeaderBytes: raw.MAX_HEADER_BYTES,
      maxHeaderCount: raw.MAX_HEADER_COUNT,
      maxBodyBytes: raw.MAX_BODY_BYTES,
      headersTimeoutMs: raw.HEADERS_TIMEOUT_MS,
      requestTimeoutMs: raw.REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: raw.KEEP_ALIVE_TIMEOUT_MS,
      idleTimeoutMs: raw.IDLE_TIMEOUT_MS,
      accessLog: raw.ACCESS_LOG
    }),
    upstream: Object.freeze({
      url: upstreamUrl,
      timeoutMs: raw.UPSTREAM_TIMEOUT_MS,
      queueTimeoutMs: raw.UPSTREAM_QUEUE_TIMEOUT_MS,
      queueLimit: raw.UPSTREAM_QUEUE_LIMIT
    }),
    token: Object.freeze({
      authUrl,
      clientId,
      clientSecret,
      timeoutMs: raw.TOKEN_TIMEOUT_MS,
      refreshMarginMs: raw.TOKEN_REFRESH_MARGIN_MS,
      waitMs: raw.TOKEN_WAIT_MS
    }),
    overload: Object.freeze({
      memoryLimitBytes: raw.MEMORY_LIMIT_BYTES,
      maxInFlightRequests: raw.MAX_IN_FLIGHT_REQUESTS,
      maxConnections: raw.MAX_CONNECTIONS
    }),
    admin: Object.freeze({
      host: raw.ADMIN_HOST,
      port: raw.ADMIN_PORT,
      maxConnections: raw.ADMIN_MAX_CONNECTIONS,
      statusEndpoint: raw.STATUS_ENDPOINT,
      statusFrom: raw.STATUS_FROM
    }),
    rateLimits,
    cache: Object.freeze({
      maxBytes: raw.CACHE_MAX_BYTES,
      entryMaxBytes: raw.CACHE_ENTRY_MAX_BYTES,
      redisMaxBytes: raw.CACHE_REDIS_MAX_BYTES
    }),
    egress: egressProxy,
    shutdown: Object.freeze({ graceMs: raw.SHUTDOWN_GRACE_MS, delayMs: raw.SHUTDOWN_DELAY_MS }),
    log: Object.freeze({ level: raw.LOG_LEVEL, format: raw.LOG_FORMAT }),
    policy: orders.policy,
    stateDir: orders.stateDir,
    tracing
  })
}

// The path callers use (README.md: every store API path starts with it).
const STORE_PATH = '/v2/store'

/** AUTH_URL and UPSTREAM_URL, checked and normalised (no trailing slash); problems are added to `problems`. */
function checkBaseUrls (
  raw: { AUTH_URL?: string | undefined, UPSTREAM_URL?: string | undefined }, problems: string[]
): { authUrl: string | undefined, upstreamUrl: string | undefined } {
  return {
    authUrl: checkBaseUrl('AUTH_URL', checkUrl('AUTH_URL', raw.AUTH_URL, problems), TOKEN_PATH,
      'the sidecar appends it itself', problems),
    upstreamUrl: checkBaseUrl('UPSTREAM_URL', checkUrl('UPSTREAM_URL', raw.UPSTREAM_URL, problems), STORE_PATH,
      'callers send paths that start with it, and each is appended to UPSTREAM_URL', problems)
  }
}

/** Checks between variables, once each has its type. */
function crossFieldProblems (raw: RawEnv): string[] {
  const problems: string[] = []
  if (raw.HEADERS_TIMEOUT_MS > raw.REQUEST_TIMEOUT_MS) {
    problems.push('HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS')
  }
  problems.push(...listenerProblems(raw))
  if (raw.MEMORY_LIMIT_BYTES !== undefined && raw.MEMORY_LIMIT_BYTES > 0 && raw.MEMORY_LIMIT_BYTES < MIN_MEMORY_LIMIT_BYTES) {
    problems.push(`MEMORY_LIMIT_BYTES: must be 0 (no limit) or at least ${MIN_MEMORY_LIMIT_BYTES} (32 MiB): below it the sidecar would shed every request`)
  }
  // Only a request with a budget ever waits for one: without rules that wait is 0.
  const hasRules = (raw.RATE_LIMITS ?? '').trim() !== '' || (raw.RATE_LIMITS_FILE ?? '') !== ''
  const budgetWaitMs = hasRules ? raw.RATE_LIMIT_MAX_WAIT_MS : 0
  if (raw.IDLE_TIMEOUT_MS <= raw.TOKEN_WAIT_MS + raw.UPSTREAM_QUEUE_TIMEOUT_MS + raw.UPSTREAM_TIMEOUT_MS + budgetWaitMs) {
    // A caller's connection is silent while its request waits for a token, for its budget, for
    // an upstream connection and for the answer: closing it sooner would leave the caller without a status line.
    problems.push('IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS' +
      (hasRules ? ' + RATE_LIMIT_MAX_WAIT_MS' : ''))
  }
  return problems
}
