import { createRequire } from 'node:module'
import type EnvSchema from 'env-schema'
import { loadEgressProxy, type EgressProxy } from './egress-proxy.js'
import { parseRules, type Rule } from './quota/rules.js'
import { readSecretFileSync, SecretFileError } from './secret-file.js'

// env-schema compiles Ajv's meta-schema as it loads (some 50 ms): it is loaded on first
// use, so that `main.js healthcheck`, which container runtimes run every few seconds,
// does not pay for it.
const require = createRequire(import.meta.url)
let loadedEnvSchema: typeof EnvSchema | undefined
function envSchema<T> (options: EnvSchema.EnvSchemaOpt<T>): T {
  loadedEnvSchema ??= require('env-schema') as typeof EnvSchema
  return loadedEnvSchema(options)
}

// Every option, its type and its default, in one place. The README's
// configuration table mirrors this schema.
export const DEFAULT_PORT = 8080
export const DEFAULT_ADMIN_PORT = 9090
export const DEFAULT_TOKEN_TIMEOUT_MS = 10_000
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 30_000
export const DEFAULT_TOKEN_REFRESH_MARGIN_MS = 5 * 60_000
export const DEFAULT_TOKEN_WAIT_MS = 3_000
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000
export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000
export const DEFAULT_REQUEST_TIMEOUT_MS = 300_000
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 72_000
export const DEFAULT_IDLE_TIMEOUT_MS = 120_000
export const DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS = 5_000
export const DEFAULT_UPSTREAM_QUEUE_LIMIT = 1_000
export const DEFAULT_RATE_LIMIT_MAX_WAIT_MS = 1_000
export const DEFAULT_RATE_LIMIT_COOLDOWN_MS = 1_000
export const DEFAULT_RATE_LIMIT_COOLDOWN_MAX_MS = 60 * 60_000
export const DEFAULT_RATE_LIMIT_REDIS_TIMEOUT_MS = 200

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
export type LogLevel = typeof LOG_LEVELS[number]

/**
 * The longest duration any variable accepts: one day. Node's timers hold at most
 * 2^31−1 ms (24.8 days); a longer delay fires after 1 ms instead (a huge
 * TOKEN_TIMEOUT_MS would time every token request out at once). One day is far longer
 * than any timeout here needs, and the sum of two (SHUTDOWN_DELAY_MS + SHUTDOWN_GRACE_MS)
 * still fits a timer.
 */
export const MAX_DURATION_MS = 24 * 60 * 60_000
/** Node's own limit for setTimeout, which MAX_DURATION_MS keeps every timer under. */
export const NODE_TIMER_MAX_MS = 2 ** 31 - 1

const durationMs = (def: number, minimum = 1) => ({ type: 'integer', minimum, maximum: MAX_DURATION_MS, default: def })
const port = (def: number) => ({ type: 'integer', minimum: 0, maximum: 65535, default: def })

const schema = {
  type: 'object',
  properties: {
    AUTH_URL: { type: 'string' },
    CLIENT_ID: { type: 'string' },
    CLIENT_ID_FILE: { type: 'string' },
    CLIENT_SECRET: { type: 'string' },
    CLIENT_SECRET_FILE: { type: 'string' },
    UPSTREAM_URL: { type: 'string' },
    HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    PORT: port(DEFAULT_PORT),
    ADMIN_HOST: { type: 'string', minLength: 1, default: '0.0.0.0' },
    ADMIN_PORT: port(DEFAULT_ADMIN_PORT),
    TOKEN_TIMEOUT_MS: durationMs(DEFAULT_TOKEN_TIMEOUT_MS),
    UPSTREAM_TIMEOUT_MS: durationMs(DEFAULT_UPSTREAM_TIMEOUT_MS),
    TOKEN_REFRESH_MARGIN_MS: durationMs(DEFAULT_TOKEN_REFRESH_MARGIN_MS, 0),
    TOKEN_WAIT_MS: durationMs(DEFAULT_TOKEN_WAIT_MS, 0),
    SHUTDOWN_GRACE_MS: durationMs(DEFAULT_SHUTDOWN_GRACE_MS),
    SHUTDOWN_DELAY_MS: durationMs(0, 0),
    MAX_HEADER_BYTES: { type: 'integer', minimum: 1024, maximum: 1024 * 1024, default: DEFAULT_MAX_HEADER_BYTES },
    MAX_BODY_BYTES: { type: 'integer', minimum: 0, default: 0 },
    HEADERS_TIMEOUT_MS: durationMs(DEFAULT_HEADERS_TIMEOUT_MS),
    REQUEST_TIMEOUT_MS: durationMs(DEFAULT_REQUEST_TIMEOUT_MS),
    KEEP_ALIVE_TIMEOUT_MS: durationMs(DEFAULT_KEEP_ALIVE_TIMEOUT_MS),
    IDLE_TIMEOUT_MS: durationMs(DEFAULT_IDLE_TIMEOUT_MS),
    UPSTREAM_QUEUE_TIMEOUT_MS: durationMs(DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS),
    UPSTREAM_QUEUE_LIMIT: { type: 'integer', minimum: 0, maximum: 100_000, default: DEFAULT_UPSTREAM_QUEUE_LIMIT },
    RATE_LIMITS: { type: 'string' },
    RATE_LIMITS_FILE: { type: 'string' },
    RATE_LIMIT_MAX_WAIT_MS: durationMs(DEFAULT_RATE_LIMIT_MAX_WAIT_MS, 0),
    RATE_LIMIT_COOLDOWN_MS: durationMs(DEFAULT_RATE_LIMIT_COOLDOWN_MS, 0),
    RATE_LIMIT_COOLDOWN_MAX_MS: durationMs(DEFAULT_RATE_LIMIT_COOLDOWN_MAX_MS),
    RATE_LIMIT_REDIS_URL: { type: 'string' },
    RATE_LIMIT_REDIS_URL_FILE: { type: 'string' },
    RATE_LIMIT_REDIS_TIMEOUT_MS: durationMs(DEFAULT_RATE_LIMIT_REDIS_TIMEOUT_MS),
    ACCESS_LOG: { type: 'boolean', default: false },
    LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info' }
  }
} as const

interface RawEnv {
  AUTH_URL?: string
  CLIENT_ID?: string
  CLIENT_ID_FILE?: string
  CLIENT_SECRET?: string
  CLIENT_SECRET_FILE?: string
  UPSTREAM_URL?: string
  HOST: string
  PORT: number
  ADMIN_HOST: string
  ADMIN_PORT: number
  TOKEN_TIMEOUT_MS: number
  UPSTREAM_TIMEOUT_MS: number
  TOKEN_REFRESH_MARGIN_MS: number
  TOKEN_WAIT_MS: number
  SHUTDOWN_GRACE_MS: number
  SHUTDOWN_DELAY_MS: number
  MAX_HEADER_BYTES: number
  MAX_BODY_BYTES: number
  HEADERS_TIMEOUT_MS: number
  REQUEST_TIMEOUT_MS: number
  KEEP_ALIVE_TIMEOUT_MS: number
  IDLE_TIMEOUT_MS: number
  UPSTREAM_QUEUE_TIMEOUT_MS: number
  UPSTREAM_QUEUE_LIMIT: number
  RATE_LIMITS?: string
  RATE_LIMITS_FILE?: string
  RATE_LIMIT_MAX_WAIT_MS: number
  RATE_LIMIT_COOLDOWN_MS: number
  RATE_LIMIT_COOLDOWN_MAX_MS: number
  RATE_LIMIT_REDIS_URL?: string
  RATE_LIMIT_REDIS_URL_FILE?: string
  RATE_LIMIT_REDIS_TIMEOUT_MS: number
  ACCESS_LOG: boolean
  LOG_LEVEL: LogLevel
}

/** The quota guard's settings (src/quota/). */
export interface RateLimitConfig {
  /** Budget rules in the order given; the first matching one wins. */
  readonly rules: readonly Rule[]
  /** Where the rules came from: `RATE_LIMITS`, `RATE_LIMITS_FILE (path)`, or undefined for none. */
  readonly rulesSource: string | undefined
  /** A request over budget waits at most this long for it to free; 0 = never waits. */
  readonly maxWaitMs: number
  /** The first cool-down after a rate-limit answer without a usable Retry-After; 0 disables cool-downs. */
  readonly cooldownMs: number
  /** Cap on Retry-After and on the backoff. */
  readonly cooldownMaxMs: number
  /** The Redis URL, credentials included: never log or show it (see redisDisplayUrl). */
  readonly redisUrl: string | undefined
  /** Where the URL came from (RATE_LIMIT_REDIS_URL, or the file's path). */
  readonly redisUrlSource: string | undefined
  /** A Redis command slower than this counts as a failure (fallback to memory). */
  readonly redisTimeoutMs: number
}

/** Where a credential comes from: the environment, or a file re-read before each token request. */
export type CredentialSource = { readonly value: string } | { readonly file: string }

export interface Config {
  readonly authUrl: string
  /** HTTPS_PROXY, HTTP_PROXY, NO_PROXY (egress-proxy.ts). */
  readonly egressProxy: EgressProxy
  readonly clientId: CredentialSource
  readonly clientSecret: CredentialSource
  readonly upstreamUrl: string
  readonly host: string
  readonly port: number
  readonly adminHost: string
  readonly adminPort: number
  readonly tokenTimeoutMs: number
  readonly upstreamTimeoutMs: number
  readonly tokenRefreshMarginMs: number
  readonly tokenWaitMs: number
  readonly shutdownGraceMs: number
  readonly shutdownDelayMs: number
  /** Largest request head (request line and headers) accepted; larger answers 431. */
  readonly maxHeaderBytes: number
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
  /** How long a request may wait for a connection to the upstream before 503 UPSTREAM_BUSY. */
  readonly upstreamQueueTimeoutMs: number
  /** How many requests may wait for a connection to the upstream; more get 503 UPSTREAM_BUSY at once. */
  readonly upstreamQueueLimit: number
  readonly accessLog: boolean
  readonly logLevel: LogLevel
  readonly rateLimits: RateLimitConfig
}

export class ConfigError extends Error {
  readonly problems: readonly string[]
  constructor (problems: string[]) {
    super('invalid configuration:\n' + problems.map((p) => `  - ${p}`).join('\n'))
    this.name = 'ConfigError'
    this.problems = problems
  }
}

export type ReadFile = (path: string) => string

// Regular files only, size-capped, never blocking on a FIFO (src/secret-file.ts).
const defaultReadFile: ReadFile = readSecretFileSync

/**
 * Validates the environment and returns a frozen Config. Every problem is
 * reported at once in a ConfigError; no message ever contains a credential.
 */
export function loadConfig (env: Record<string, string | undefined>, readFile: ReadFile = defaultReadFile): Config {
  const problems: string[] = []
  let raw: RawEnv
  let typed = true
  try {
    raw = envSchema<RawEnv>({ schema: structuredClone(schema) as object, data: { ...env }, env: false, dotenv: false })
  } catch (err) {
    typed = false
    problems.push(...schemaProblems(err))
    // Keep checking what can be checked so that one run names every problem.
    raw = { ...env } as unknown as RawEnv
  }

  const authUrl = checkBaseUrl('AUTH_URL', checkUrl('AUTH_URL', raw.AUTH_URL, problems), TOKEN_PATH,
    'the sidecar appends it itself', problems)
  const upstreamUrl = checkBaseUrl('UPSTREAM_URL', checkUrl('UPSTREAM_URL', raw.UPSTREAM_URL, problems), STORE_PATH,
    'callers send paths that start with it, and each is appended to UPSTREAM_URL', problems)
  const clientId = checkCredential('CLIENT_ID', raw.CLIENT_ID, raw.CLIENT_ID_FILE, readFile, problems)
  const clientSecret = checkCredential('CLIENT_SECRET', raw.CLIENT_SECRET, raw.CLIENT_SECRET_FILE, readFile, problems)

  if (typed && raw.HEADERS_TIMEOUT_MS > raw.REQUEST_TIMEOUT_MS) {
    problems.push('HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS')
  }
  if (typed) problems.push(...listenerProblems(raw))
  // Only a request with a budget ever waits for one: without rules that wait is 0.
  const hasRules = (raw.RATE_LIMITS ?? '').trim() !== '' || (raw.RATE_LIMITS_FILE ?? '') !== ''
  const budgetWaitMs = hasRules ? raw.RATE_LIMIT_MAX_WAIT_MS : 0
  if (typed && raw.IDLE_TIMEOUT_MS <= raw.TOKEN_WAIT_MS + raw.UPSTREAM_QUEUE_TIMEOUT_MS + raw.UPSTREAM_TIMEOUT_MS + budgetWaitMs) {
    // A caller's connection is silent while its request waits for a token, for its budget, for
    // an upstream connection and for the answer: closing it sooner would leave the caller without a status line.
    problems.push('IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS' +
      (hasRules ? ' + RATE_LIMIT_MAX_WAIT_MS' : ''))
  }
  const rateLimits = checkRateLimits(raw, typed, readFile, problems)
  const egressProxy = loadEgressProxy(env, problems)

  if (problems.length > 0 || authUrl === undefined || upstreamUrl === undefined ||
      clientId === undefined || clientSecret === undefined || rateLimits === undefined) {
    throw new ConfigError(problems)
  }

  return Object.freeze({
    authUrl,
    egressProxy,
    clientId,
    clientSecret,
    upstreamUrl,
    host: raw.HOST,
    port: raw.PORT,
    adminHost: raw.ADMIN_HOST,
    adminPort: raw.ADMIN_PORT,
    tokenTimeoutMs: raw.TOKEN_TIMEOUT_MS,
    upstreamTimeoutMs: raw.UPSTREAM_TIMEOUT_MS,
    tokenRefreshMarginMs: raw.TOKEN_REFRESH_MARGIN_MS,
    tokenWaitMs: raw.TOKEN_WAIT_MS,
    shutdownGraceMs: raw.SHUTDOWN_GRACE_MS,
    shutdownDelayMs: raw.SHUTDOWN_DELAY_MS,
    maxHeaderBytes: raw.MAX_HEADER_BYTES,
    maxBodyBytes: raw.MAX_BODY_BYTES,
    headersTimeoutMs: raw.HEADERS_TIMEOUT_MS,
    requestTimeoutMs: raw.REQUEST_TIMEOUT_MS,
    keepAliveTimeoutMs: raw.KEEP_ALIVE_TIMEOUT_MS,
    idleTimeoutMs: raw.IDLE_TIMEOUT_MS,
    upstreamQueueTimeoutMs: raw.UPSTREAM_QUEUE_TIMEOUT_MS,
    upstreamQueueLimit: raw.UPSTREAM_QUEUE_LIMIT,
    accessLog: raw.ACCESS_LOG,
    logLevel: raw.LOG_LEVEL,
    rateLimits
  })
}

/** RATE_LIMITS(_FILE) and the RATE_LIMIT_* settings: every problem is added to `problems`. */
function checkRateLimits (raw: RawEnv, typed: boolean, readFile: ReadFile, problems: string[]): RateLimitConfig | undefined {
  const before = problems.length
  const inline = raw.RATE_LIMITS
  const file = raw.RATE_LIMITS_FILE
  let rules: Rule[] = []
  let rulesSource: string | undefined
  if (inline !== undefined && inline.trim() !== '' && file !== undefined && file !== '') {
    problems.push('RATE_LIMITS: set either RATE_LIMITS or RATE_LIMITS_FILE, not both')
  } else if (file !== undefined && file !== '') {
    let text: string | undefined
    try {
      text = readFile(file)
    } catch (err) {
      problems.push(err instanceof SecretFileError
        ? `RATE_LIMITS_FILE: ${err.message}`
        : `RATE_LIMITS_FILE: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
    }
    if (text !== undefined) {
      const parsed = parseRules(text, `RATE_LIMITS_FILE (${file})`)
      rules = parsed.rules
      problems.push(...parsed.problems)
      rulesSource = `RATE_LIMITS_FILE (${file})`
    }
  } else if (inline !== undefined && inline.trim() !== '') {
    const parsed = parseRules(inline, 'RATE_LIMITS')
    rules = parsed.rules
    problems.push(...parsed.problems)
    rulesSource = 'RATE_LIMITS'
  }

  let redisUrl: string | undefined
  let redisUrlSource: string | undefined
  const urlValue = raw.RATE_LIMIT_REDIS_URL
  const urlFile = raw.RATE_LIMIT_REDIS_URL_FILE
  if (urlValue !== undefined && urlValue !== '' && urlFile !== undefined && urlFile !== '') {
    problems.push('RATE_LIMIT_REDIS_URL: set either RATE_LIMIT_REDIS_URL or RATE_LIMIT_REDIS_URL_FILE, not both')
  } else if (urlFile !== undefined && urlFile !== '') {
    try {
      const url = trimCredential(readFile(urlFile)).trim()
      const problem = redisUrlProblem(url)
      if (problem === undefined) {
        redisUrl = url
        redisUrlSource = `RATE_LIMIT_REDIS_URL_FILE (${urlFile})`
      } else {
        problems.push(`RATE_LIMIT_REDIS_URL_FILE: in ${urlFile}, the URL ${problem}`)
      }
    } catch (err) {
      problems.push(err instanceof SecretFileError
        ? `RATE_LIMIT_REDIS_URL_FILE: ${err.message}`
        : `RATE_LIMIT_REDIS_URL_FILE: cannot read ${urlFile} (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
    }
  } else if (urlValue !== undefined && urlValue !== '') {
    const problem = redisUrlProblem(urlValue)
    if (problem === undefined) {
      redisUrl = urlValue
      redisUrlSource = 'RATE_LIMIT_REDIS_URL'
    } else {
      problems.push(`RATE_LIMIT_REDIS_URL: ${problem}`)
    }
  }

  if (typed && raw.RATE_LIMIT_COOLDOWN_MS > raw.RATE_LIMIT_COOLDOWN_MAX_MS) {
    problems.push('RATE_LIMIT_COOLDOWN_MS: must not exceed RATE_LIMIT_COOLDOWN_MAX_MS')
  }
  if (!typed || problems.length > before) return undefined
  return Object.freeze({
    rules: Object.freeze(rules),
    rulesSource,
    maxWaitMs: raw.RATE_LIMIT_MAX_WAIT_MS,
    cooldownMs: raw.RATE_LIMIT_COOLDOWN_MS,
    cooldownMaxMs: raw.RATE_LIMIT_COOLDOWN_MAX_MS,
    redisUrl,
    redisUrlSource,
    redisTimeoutMs: raw.RATE_LIMIT_REDIS_TIMEOUT_MS
  })
}

/** What is wrong with a Redis URL, never repeating it (it may hold a password). */
function redisUrlProblem (value: string): string | undefined {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return 'is not a valid URL'
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') return 'must be a redis:// or rediss:// URL'
  if (url.hostname === '') return 'must name a host'
  if (url.search !== '' || url.hash !== '') return 'must not contain a query string or fragment'
  if (url.pathname !== '' && url.pathname !== '/' && !/^\/\d+$/.test(url.pathname)) return 'may only have a database number as its path (/0)'
  return undefined
}

/** A Redis URL as it may be shown: `scheme://host:port`, never the user, password or path. */
export function redisDisplayUrl (value: string): string {
  try {
    const url = new URL(value)
    const port = url.port === '' ? '6379' : url.port
    return `${url.protocol}//${url.hostname}:${port}`
  } catch {
    return 'redis://(invalid)'
  }
}

// The paths the sidecar adds itself (contract §4.1) and the one callers use (README).
const TOKEN_PATH = '/v1/oauth/accesstoken'
const STORE_PATH = '/v2/store'

/**
 * Refuses a base URL that already ends in the path the sidecar or its callers add:
 * `AUTH_URL=https://transact.ti.com/v1/oauth/accesstoken` would ask
 * `.../v1/oauth/accesstoken/v1/oauth/accesstoken` and get 404 on every token request.
 * The message shows the URL to set instead (a URL never holds a credential: checkUrl
 * refuses user info).
 */
function checkBaseUrl (
  name: string, url: string | undefined, path: string, why: string, problems: string[]
): string | undefined {
  if (url === undefined) return undefined
  const { pathname } = new URL(url)
  if (!pathname.toLowerCase().replace(/\/+$/, '').endsWith(path)) return url
  const base = url.slice(0, url.length - path.length).replace(/\/+$/, '')
  problems.push(`${name}: must not end in ${path} (${why}): set ${name}=${base}`)
  return undefined
}

/**
 * Whether two listen addresses could collide on one port, as far as can be told without
 * resolving names: the same host; `::` (dual-stack on Linux, so every address); `0.0.0.0`
 * and anything but an IPv6 literal; `localhost` and a loopback address. `127.0.0.1` and
 * `::1` do not collide, nor do two different addresses.
 */
export function hostsOverlap (a: string, b: string): boolean {
  const [x, y] = [normalHost(a), normalHost(b)]
  if (x === y || x === '::' || y === '::') return true
  if (x === '0.0.0.0') return !y.includes(':')
  if (y === '0.0.0.0') return !x.includes(':')
  return (x === 'localhost' && LOOPBACK.has(y)) || (y === 'localhost' && LOOPBACK.has(x))
}
const LOOPBACK = new Set(['127.0.0.1', '::1'])
function normalHost (host: string): string {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1')
  return h === '::0' || h === '0:0:0:0:0:0:0:0' ? '::' : h
}

// A host name (RFC 1123 labels) or an IP literal; anything else cannot be listened on.
const HOST_PATTERN = /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i
const IP_PATTERN = /^(?:\d{1,3}(?:\.\d{1,3}){3}|\[?[0-9a-f:.]*:[0-9a-f:.]*(?:%[\w.-]+)?\]?)$/i

/** What check-config can see about the two listeners without listening. */
function listenerProblems (raw: RawEnv): string[] {
  const problems: string[] = []
  for (const name of ['HOST', 'ADMIN_HOST'] as const) {
    const host = raw[name]
    if (!HOST_PATTERN.test(host) && !IP_PATTERN.test(host)) problems.push(`${name}: is neither a host name nor an IP address`)
  }
  if (raw.PORT !== 0 && raw.PORT === raw.ADMIN_PORT && hostsOverlap(raw.HOST, raw.ADMIN_HOST)) {
    problems.push(`PORT: equals ADMIN_PORT (${raw.PORT}) on overlapping addresses ` +
      `(HOST=${raw.HOST}, ADMIN_HOST=${raw.ADMIN_HOST}): the two listeners need different ports`)
  }
  return problems
}

const LISTEN_ERRORS: Record<string, string> = {
  EADDRINUSE: 'the address is already in use (another process, or the other listener, holds it)',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the address is not one of this machine\'s',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name could not be resolved (name resolution failed)',
  EAI_FAIL: 'the host name could not be resolved (name resolution failed)',
  EAI_NONAME: 'the host name does not resolve'
}

/**
 * One line for a listener that could not start, naming the variables that chose the
 * address: `PORT=8080 (HOST=127.0.0.1): cannot listen on 127.0.0.1:8080: the address is
 * already in use (EADDRINUSE)`.
 */
export function listenFailure (
  names: { host: string, port: string }, host: string, port: number, err: unknown
): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  const why = (code !== undefined ? LISTEN_ERRORS[code] : undefined) ?? String((err as Error | undefined)?.message ?? err)
  const address = host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`
  const variable = code === 'ENOTFOUND' || (code?.startsWith('EAI_') ?? false) || code === 'EADDRNOTAVAIL'
    ? `${names.host}=${host}`
    : `${names.port}=${port} (${names.host}=${host})`
  return `${variable}: cannot listen on ${address}: ${why}${code !== undefined ? ` (${code})` : ''}`
}

interface AjvError { instancePath: string, keyword?: string, message?: string, params: Record<string, unknown> }

function schemaProblems (err: unknown): string[] {
  const errors = (err as { errors?: AjvError[] }).errors
  if (!Array.isArray(errors)) return [String((err as Error).message)]
  // Ajv messages name the constraint, never the value, so no secret can leak here.
  return errors.map((e) => {
    const name = e.instancePath.replace(/^\//, '')
    const allowed = Array.isArray(e.params.allowedValues) ? ` (${e.params.allowedValues.join(', ')})` : ''
    const why = e.keyword === 'maximum' && e.params.limit === MAX_DURATION_MS
      ? ` (one day: Node's timers overflow above ${NODE_TIMER_MAX_MS} ms)`
      : ''
    return `${name}: ${e.message ?? 'is invalid'}${allowed}${why}`
  })
}

function checkUrl (
  name: string, value: string | undefined, problems: string[], { allowQuery = false } = {}
): string | undefined {
  if (value === undefined || value === '') {
    problems.push(`${name}: is required`)
    return undefined
  }
  let url: URL
  try {
    url = new URL(value)
  } catch {
    problems.push(`${name}: is not a valid URL`)
    return undefined
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    problems.push(`${name}: must be an http:// or https:// URL`)
    return undefined
  }
  if (url.username !== '' || url.password !== '') {
    // A URL is logged and shown in errors; credentials belong in CLIENT_ID / CLIENT_SECRET.
    problems.push(`${name}: must not contain credentials`)
    return undefined
  }
  if (allowQuery) return url.href
  if (url.search !== '' || url.hash !== '') {
    problems.push(`${name}: must not contain a query string or fragment`)
    return undefined
  }
  return url.href.replace(/\/+$/, '')
}

function checkCredential (
  name: string, value: string | undefined, file: string | undefined, readFile: ReadFile, problems: string[]
): CredentialSource | undefined {
  const fileName = `${name}_FILE`
  if (value !== undefined && value !== '' && file !== undefined && file !== '') {
    problems.push(`${name}: set either ${name} or ${fileName}, not both`)
    return undefined
  }
  if (file !== undefined && file !== '') {
    let content: string
    try {
      content = readFile(file)
    } catch (err) {
      problems.push(err instanceof SecretFileError
        ? `${fileName}: ${err.message}`
        : `${fileName}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`)
      return undefined
    }
    const problem = credentialProblem(trimCredential(content))
    if (problem !== undefined) {
      problems.push(`${fileName}: in ${file}, ${problem.startsWith('is ') ? `the value ${problem}` : problem}`)
      return undefined
    }
    return Object.freeze({ file })
  }
  if (value === undefined || value === '') {
    problems.push(`${name}: is required (or ${fileName})`)
    return undefined
  }
  const problem = credentialProblem(value)
  if (problem !== undefined) {
    problems.push(`${name}: ${problem}`)
    return undefined
  }
  return Object.freeze({ value })
}

/** Kubernetes and compose secret files usually end with a newline that is not part of the value. */
export function trimCredential (content: string): string {
  return content.replace(/\r?\n$/, '')
}

/**
 * The contract sends the credentials without percent-encoding (§4.1 rule 2), so a
 * value with `&` or whitespace would corrupt the form body. Says what is wrong
 * without ever repeating the value.
 */
export function credentialProblem (value: string): string | undefined {
  if (value === '') return 'is empty'
  const chars = Array.from(value)
  const at = chars.findIndex((c) => characterKind(c) !== undefined)
  if (at === -1) return undefined
  const kind = characterKind(chars[at] ?? '') ?? ''
  const more = chars.filter((c) => characterKind(c) !== undefined).length - 1
  return `character ${at + 1} of ${chars.length} is ${kind}` +
    (more > 0 ? ` (and ${more} more such character${more > 1 ? 's' : ''})` : '') +
    ": the contract's unencoded form body cannot carry whitespace, '&' or control characters"
}

const NAMED_CHARACTERS: Record<string, string> = {
  '\n': 'a newline', '\r': 'a carriage return', '\t': 'a tab', ' ': 'a space', '&': "an '&'", '\u00a0': 'a no-break space'
}

/** The kind of a character a credential cannot hold, or undefined when it may. */
function characterKind (c: string): string | undefined {
  const named = NAMED_CHARACTERS[c]
  if (named !== undefined) return named
  if (/\s/u.test(c)) return `a whitespace character (U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')})`
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(c)) return `a control character (U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')})`
  return undefined
}

// The stand-in TI APIs (`main.js stand-in`, used by docker-compose and the demo).
export const DEFAULT_STAND_IN_PORT = 8081
export const DEMO_CLIENT_ID = 'demo-client'
// A secret with `+`, `/` and `=`, the characters percent-encoding would change: the
// demo shows it reaching the token endpoint exactly as is.
export const DEMO_CLIENT_SECRET = 'Zm9v+YmFy/c2VjcmV0='

export interface StandInConfig {
  readonly host: string
  readonly port: number
  readonly clientId: string
  readonly clientSecret: string
  readonly tokenLifetimeMs: number
  readonly style: 'ti' | 'apigee'
  readonly logLevel: LogLevel
}

const standInSchema = {
  type: 'object',
  properties: {
    STAND_IN_HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    STAND_IN_PORT: port(DEFAULT_STAND_IN_PORT),
    STAND_IN_CLIENT_ID: { type: 'string', minLength: 1, default: DEMO_CLIENT_ID },
    STAND_IN_CLIENT_SECRET: { type: 'string', minLength: 1, default: DEMO_CLIENT_SECRET },
    STAND_IN_CLIENT_SECRET_FILE: { type: 'string' },
    STAND_IN_TOKEN_LIFETIME_MS: durationMs(60 * 60_000, 1000),
    STAND_IN_STYLE: { type: 'string', enum: ['ti', 'apigee'], default: 'ti' },
    LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info' }
  }
} as const

export function loadStandInConfig (env: Record<string, string | undefined>, readFile: ReadFile = defaultReadFile): StandInConfig {
  let raw: Record<string, string | number | undefined>
  try {
    raw = envSchema({ schema: structuredClone(standInSchema) as object, data: { ...env }, env: false, dotenv: false })
  } catch (err) {
    throw new ConfigError(schemaProblems(err))
  }
  let clientSecret = raw.STAND_IN_CLIENT_SECRET as string
  if (typeof raw.STAND_IN_CLIENT_SECRET_FILE === 'string' && raw.STAND_IN_CLIENT_SECRET_FILE !== '') {
    try {
      clientSecret = trimCredential(readFile(raw.STAND_IN_CLIENT_SECRET_FILE))
    } catch (err) {
      throw new ConfigError([`STAND_IN_CLIENT_SECRET_FILE: cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})`])
    }
  }
  return Object.freeze({
    host: raw.STAND_IN_HOST as string,
    port: raw.STAND_IN_PORT as number,
    clientId: raw.STAND_IN_CLIENT_ID as string,
    clientSecret,
    tokenLifetimeMs: raw.STAND_IN_TOKEN_LIFETIME_MS as number,
    style: raw.STAND_IN_STYLE as 'ti' | 'apigee',
    logLevel: raw.LOG_LEVEL as LogLevel
  })
}

// The example caller service (`main.js caller`, used by docker-compose).
export interface CallerConfig {
  readonly targetUrl: string
  readonly intervalMs: number
  readonly timeoutMs: number
  readonly logLevel: LogLevel
}

const callerSchema = {
  type: 'object',
  properties: {
    CALLER_TARGET_URL: { type: 'string', minLength: 1, default: 'http://localhost:8080/v2/store/products/LM358BIDR?currency=USD' },
    CALLER_INTERVAL_MS: durationMs(5000, 100),
    CALLER_TIMEOUT_MS: durationMs(10_000),
    LOG_LEVEL: { type: 'string', enum: LOG_LEVELS, default: 'info' }
  }
} as const

export function loadCallerConfig (env: Record<string, string | undefined>): CallerConfig {
  let raw: Record<string, string | number>
  try {
    raw = envSchema({ schema: structuredClone(callerSchema) as object, data: { ...env }, env: false, dotenv: false })
  } catch (err) {
    throw new ConfigError(schemaProblems(err))
  }
  const problems: string[] = []
  const targetUrl = checkUrl('CALLER_TARGET_URL', raw.CALLER_TARGET_URL as string, problems, { allowQuery: true })
  if (targetUrl === undefined) throw new ConfigError(problems)
  return Object.freeze({
    targetUrl,
    intervalMs: raw.CALLER_INTERVAL_MS as number,
    timeoutMs: raw.CALLER_TIMEOUT_MS as number,
    logLevel: raw.LOG_LEVEL as LogLevel
  })
}
