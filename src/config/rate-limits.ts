// The quota guard's settings: RATE_LIMITS(_FILE) and RATE_LIMIT_*, read from the environment
// that src/config/ has typed (their schema entries, defaults and limits are there).
import { DEFAULT_RATE_LIMIT_ALONE_EXTRA_MS, type RawEnv } from './schema.js'
import { type ReadFileSync } from './parse-env.js'
import { trimCredential } from './credentials.js'
import { SecretFileError } from './secret-file.js'
import { longestWindowMs, parseRules, type Rule } from './rate-limit-rules.js'

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
  /** RATE_LIMIT_REDIS_URL_FILE: re-read before each reconnection, so a rotated password is picked up. */
  readonly redisUrlFile: string | undefined
  /** A Redis command slower than this counts as a failure (degraded mode). */
  readonly redisTimeoutMs: number
  /**
   * The most sidecars on this credential that run at once (RATE_LIMIT_FLEET_SIZE); 0 when
   * unset (then a sidecar cut off from Redis spends nothing). Cut off, it spends limit / size.
   */
  readonly fleetSize: number
  /**
   * RATE_LIMIT_ALONE_MAX_MS in effect (aloneBoundMs): cut off from Redis for longer (since the
   * send of its last script Redis ran), a sidecar sends nothing budgeted; so Redis can end the
   * hold of one that lapsed once this + its longest window has passed. 0: no bound, and its
   * hold ends only by the count.
   */
  readonly aloneMaxMs: number
  /** RATE_LIMIT_HEADERS: RateLimit-Policy and RateLimit on the answers of budgeted rules. */
  readonly headers: boolean
}

/**
 * How long a sidecar cut off from Redis may spend alone (0: no bound). Unset: the longest
 * window + an hour. A declared fleet of one has none: its ledger is the whole tally, and the
 * count releases its entry once its replacement is present (one window held), so a bound would
 * only refuse its callers. More present than declared changes nothing: with no bound its span
 * is none, and Redis ends its entry only by the count, as for an earlier version.
 */
export function aloneBoundMs (setting: number | undefined, fleetSize: number | undefined, rules: readonly Rule[]): number {
  if (fleetSize === 1) return 0
  return setting ?? longestWindowMs(rules) + DEFAULT_RATE_LIMIT_ALONE_EXTRA_MS
}

/** RATE_LIMITS(_FILE) and the RATE_LIMIT_* settings: every problem is added to `problems`. */
export function checkRateLimits (raw: RawEnv, typed: boolean, readFile: ReadFileSync, problems: string[]): RateLimitConfig | undefined {
  const before = problems.length
  const { rules, rulesSource } = readRules(raw, readFile, problems)

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
  // The read cache's sizes are Config.cache (load.ts); only rules with cache= use them.
  if (typed && raw.CACHE_ENTRY_MAX_BYTES > raw.CACHE_MAX_BYTES) {
    problems.push('CACHE_ENTRY_MAX_BYTES: must not exceed CACHE_MAX_BYTES')
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
    redisUrlFile: redisUrlSource === undefined || redisUrlSource === 'RATE_LIMIT_REDIS_URL' ? undefined : urlFile,
    redisTimeoutMs: raw.RATE_LIMIT_REDIS_TIMEOUT_MS,
    fleetSize: raw.RATE_LIMIT_FLEET_SIZE ?? 0,
    aloneMaxMs: aloneBoundMs(raw.RATE_LIMIT_ALONE_MAX_MS, raw.RATE_LIMIT_FLEET_SIZE, rules),
    headers: raw.RATE_LIMIT_HEADERS
  })
}

/** RATE_LIMITS or RATE_LIMITS_FILE (not both): the rules, and where they came from. */
function readRules (raw: RawEnv, readFile: ReadFileSync, problems: string[]): { rules: Rule[], rulesSource: string | undefined } {
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
      const parsed = parseRules(text, `RATE_LIMITS_FILE (${file})`, { fromFile: true })
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
  return { rules, rulesSource }
}

/**
 * The Redis URL in RATE_LIMIT_REDIS_URL_FILE as it is now (for a reconnection after the
 * password was rotated), or undefined when the file cannot be read or holds no valid URL:
 * then the URL in use stays.
 */
export function rereadRedisUrl (file: string, readFile: ReadFileSync): string | undefined {
  try {
    const url = trimCredential(readFile(file)).trim()
    return redisUrlProblem(url) === undefined ? url : undefined
  } catch {
    return undefined
  }
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
