// The budget rules of RATE_LIMITS / RATE_LIMITS_FILE: parsing (every problem at once,
// each naming its rule) and matching. Pure functions, no I/O.

/** One limit of a rule: at most `count` upstream sends in any interval of `windowMs` (a sliding window). */
export interface Limit {
  readonly count: number
  readonly windowMs: number
  /** As written, e.g. `1/4h` (shown in /status, part of the Redis key). */
  readonly text: string
}

export interface Rule {
  /** `METHOD PATH` as written: the metric label, the /status and log name. */
  readonly id: string
  /** An upper-case method token, or `*` for any. */
  readonly method: string
  /** The pattern's segments (the part after the leading `/`, split on `/`). */
  readonly segments: readonly string[]
  readonly limits: readonly Limit[]
  /** `cache=` and `stale=`: a GET answer of this rule may be reused (src/cache/); absent: never cached. */
  readonly cache?: CacheOption
  /** `idempotency=`, `key=body:FIELD`, `require-key`: one send per key (src/idempotency/); absent: none. */
  readonly idempotency?: IdempotencyOption
}

/** How long a key holds its request's answer, where the key comes from, and whether one is required. */
export interface IdempotencyOption {
  readonly lifetimeMs: number
  /** `key=body:FIELD`: a dotted path into a JSON body, used when the caller sends no Idempotency-Key header. */
  readonly bodyField?: string
  /** `require-key`: a request with no key gets 400. */
  readonly requireKey: boolean
}

/** How long a rule's answers may be reused (`cache=`), and served stale beyond that when TI cannot be asked (`stale=`). */
export interface CacheOption {
  readonly freshMs: number
  readonly staleMs: number
}

/** The longest `cache=` or `stale=`: a week. */
export const MAX_CACHE_MS = 7 * 24 * 60 * 60_000
/** The shortest and longest `idempotency=`: a second, a week. */
export const MIN_IDEMPOTENCY_MS = 1000
export const MAX_IDEMPOTENCY_MS = 7 * 24 * 60 * 60_000

export const MIN_WINDOW_MS = 1
export const MAX_WINDOW_MS = 24 * 60 * 60_000

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }
const METHOD = /^(?:\*|[A-Z][A-Z0-9_-]*)$/
const LIMIT = /^(\d+)\/(\d*)(ms|s|m|h|d)$/
const OPTION = /^(cache|stale)=(.*)$/
const IDEMPOTENCY_OPTION = /^(?:(idempotency|key)=(.*)|(require-key))$/
// A JSON field path: names of letters, digits, `_` and `-`, joined by dots (`order.poNumber`).
const BODY_FIELD = /^body:([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)$/
/** Methods an idempotency key applies to: those that change something (RFC 9110 §9.2.2: POST and PATCH are not idempotent). */
const KEYED_METHODS = new Set(['POST', 'PATCH', 'PUT', 'DELETE'])
const DURATION = /^(\d+)(ms|s|m|h|d)$/

/** How a problem names the text it is about: quoted, or (from a file) not at all. */
type Show = (text: string) => string
const QUOTED: Show = (text) => ` "${text}"`

/** Why a limit such as `1/4h` is not valid, or the limit. */
export function parseLimit (text: string, show: Show = QUOTED): Limit | string {
  const match = LIMIT.exec(text)
  if (match === null) return `limit${show(text)} is not N/WINDOW (e.g. 5/1s, 1/4h, 5/s; units ms, s, m, h, d)`
  const count = Number(match[1])
  if (!Number.isSafeInteger(count) || count < 1) return `limit${show(text)}: N must be a positive integer`
  const amount = match[2] === '' ? 1 : Number(match[2])
  const windowMs = amount * (UNIT_MS[match[3] ?? ''] ?? 0)
  if (windowMs < MIN_WINDOW_MS) return `limit${show(text)}: the window must be at least 1 ms`
  if (windowMs > MAX_WINDOW_MS) return `limit${show(text)}: the window must be at most 1 day`
  return { count, windowMs, text }
}

/** Why a PATH pattern is not valid, or its segments. */
export function parsePattern (path: string, show: Show = QUOTED): readonly string[] | string {
  if (!path.startsWith('/')) return `path${show(path)} must start with /`
  if (path.includes('?') || path.includes('#')) return `path${show(path)} must not contain ? or #`
  // Normalised exactly as request paths are (matchSegments), so a rule written with %7E,
  // a trailing / or // means what a request written that way means.
  const segments = matchSegments(path)
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] ?? ''
    if (segment === '**' && i !== segments.length - 1) return `path${show(path)}: ** may only be the last segment`
    if (segment !== '*' && segment !== '**' && segment.includes('*')) {
      return `path${show(path)}: * must be a whole segment (* or **)`
    }
  }
  return segments
}

/** Why `cache=` / `stale=` options are not valid for a rule of this method, or what they say (undefined: none given). */
function parseCacheOptions (method: string, options: ReadonlyArray<{ name: string, value: string }>, show: Show): CacheOption | undefined | string[] {
  if (options.length === 0) return undefined
  const problems: string[] = []
  const ms: Record<string, number> = {}
  for (const { name, value } of options) {
    const match = DURATION.exec(value)
    const amount = match === null ? NaN : Number(match[1]) * (UNIT_MS[match[2] ?? ''] ?? 0)
    if (name in ms) problems.push(`repeats ${name}=`)
    else if (!(amount >= 1) || amount > MAX_CACHE_MS) problems.push(`${name}=${show(value).trim()} must be a duration from 1ms to 7d (e.g. 4h, 30m, 1d)`)
    else ms[name] = amount
  }
  if (ms.cache === undefined && problems.length === 0) problems.push('stale= needs cache= (how long an answer is fresh)')
  if (method !== 'GET' && method !== '*') problems.push('cache= applies to GET (and HEAD) requests only: the rule\'s method must be GET or *')
  if (problems.length > 0) return problems
  return Object.freeze({ freshMs: ms.cache ?? 0, staleMs: ms.stale ?? 0 })
}

/** Why `idempotency=`, `key=` and `require-key` are not valid for a rule of this method, or what they say (undefined: none given). */
function parseIdempotencyOptions (method: string, words: readonly string[], show: Show): IdempotencyOption | undefined | string[] {
  if (words.length === 0) return undefined
  const problems: string[] = []
  let lifetimeMs: number | undefined
  let bodyField: string | undefined
  let requireKey = false
  const seen = new Set<string>()
  for (const word of words) {
    const match = IDEMPOTENCY_OPTION.exec(word)
    const name = match?.[1] ?? 'require-key'
    const value = match?.[2] ?? ''
    if (seen.has(name)) {
      problems.push(`repeats ${name}${name === 'require-key' ? '' : '='}`)
      continue
    }
    seen.add(name)
    if (name === 'require-key') {
      requireKey = true
    } else if (name === 'key') {
      const field = BODY_FIELD.exec(value)?.[1]
      if (field === undefined) problems.push(`key=${show(value).trim()} must be body:FIELD (a JSON body field, e.g. key=body:poNumber)`)
      else bodyField = field
    } else {
      const duration = DURATION.exec(value)
      const amount = duration === null ? NaN : Number(duration[1]) * (UNIT_MS[duration[2] ?? ''] ?? 0)
      if (!(amount >= MIN_IDEMPOTENCY_MS) || amount > MAX_IDEMPOTENCY_MS) problems.push(`idempotency=${show(value).trim()} must be a duration from 1s to 7d (e.g. 24h)`)
      else lifetimeMs = amount
    }
  }
  if (!seen.has('idempotency') && problems.length === 0) problems.push('key= and require-key need idempotency= (how long a key holds its answer)')
  if (!KEYED_METHODS.has(method)) problems.push('idempotency= applies to requests that change something: the rule\'s method must be POST, PATCH, PUT or DELETE')
  if (problems.length > 0 || lifetimeMs === undefined) return problems
  return Object.freeze({ lifetimeMs, requireKey, ...(bodyField === undefined ? {} : { bodyField }) })
}

export interface ParsedRules {
  rules: Rule[]
  problems: string[]
}

/**
 * Parses rules separated by `;` or newlines; `#` starts a comment (to the end of the
 * line) and blank entries are ignored. `source` names the variable in each problem:
 * `RATE_LIMITS: rule 2 "GET /x 5/q": limit "5/q" is not N/WINDOW ...`.
 * From a file (`fromFile`), a problem names the line and never repeats its text: a wrong
 * path (a secret, /proc/self/environ) must not print the file. Only a method and path that
 * are valid are shown: `RATE_LIMITS_FILE (/etc/rules): line 3 (GET /x): a limit is not N/WINDOW ...`.
 */
export function parseRules (text: string, source: string, { fromFile = false } = {}): ParsedRules {
  const rules: Rule[] = []
  const problems: string[] = []
  const seen = new Set<string>()
  const show: Show = fromFile ? () => '' : QUOTED
  // Stryker disable next-line Regex: `.` never crosses the line it is on, so the $ anchor changes nothing
  const entries = text.split('\n').flatMap((line, i) => line.replace(/#.*$/, '').split(';').map((entry) => ({ entry, line: i + 1 })))
  let n = 0
  for (const { entry, line } of entries) {
    // Stryker disable next-line MethodExpression,Regex: the filter drops the empty words that an untrimmed entry or single-space split leaves
    const words = entry.trim().split(/\s+/).filter((w) => w !== '')
    if (words.length === 0) continue
    n += 1
    const [method = '', path = '', ...rest] = words
    const limitTexts = rest.filter((w) => !OPTION.test(w) && !IDEMPOTENCY_OPTION.test(w))
    const options = rest.flatMap((w) => {
      const m = OPTION.exec(w)
      return m === null ? [] : [{ name: m[1] ?? '', value: m[2] ?? '' }]
    })
    const own: string[] = []
    if (!METHOD.test(method)) own.push(`method${show(method)} must be an upper-case HTTP method or *`)
    const segments = parsePattern(path, show)
    if (typeof segments === 'string') own.push(segments)
    const where = !fromFile
      ? `${source}: rule ${n} "${words.join(' ')}"`
      : `${source}: line ${line}${own.length === 0 ? ` (${method} ${path})` : ''}`
    const idempotency = parseIdempotencyOptions(method, rest.filter((w) => IDEMPOTENCY_OPTION.test(w)), fromFile ? () => '' : QUOTED)
    if (Array.isArray(idempotency)) own.push(...idempotency)
    // A rule may carry idempotency= alone: a key per order without a budget.
    if (limitTexts.length === 0 && idempotency === undefined) own.push('needs at least one limit (METHOD PATH N/WINDOW [N/WINDOW ...] [cache=DURATION [stale=DURATION]])')
    const limits: Limit[] = []
    for (const [k, limitText] of limitTexts.entries()) {
      const limit = parseLimit(limitText, fromFile ? () => ` ${k + 1}` : QUOTED)
      if (typeof limit === 'string') own.push(limit)
      else if (limits.some((l) => l.text === limit.text)) own.push(`repeats the limit ${limit.text}`)
      else limits.push(limit)
    }
    const cache = parseCacheOptions(method, options, fromFile ? () => '' : QUOTED)
    if (Array.isArray(cache)) own.push(...cache)
    const id = `${method} ${path}`
    if (own.length === 0 && seen.has(id)) own.push(`repeats the rule ${id} (the first matching rule wins: this one would never apply)`)
    if (own.length === 0 && typeof segments !== 'string') {
      const hiding = rules.find((earlier) => covers(earlier, method, segments))
      if (hiding !== undefined && !seen.has(id)) {
        own.push(`is hidden by the earlier rule ${hiding.id}: every request it matches matches that one first, so this one would never apply (put the narrower rule first)`)
      }
    }
    if (own.length > 0 || typeof segments === 'string') {
      problems.push(...own.map((p) => `${where}: ${p}`))
      continue
    }
    seen.add(id)
    const cached = Array.isArray(cache) || cache === undefined ? {} : { cache }
    const keyed = Array.isArray(idempotency) || idempotency === undefined ? {} : { idempotency }
    rules.push(Object.freeze({ id, method, segments: Object.freeze(segments), limits: Object.freeze(limits), ...cached, ...keyed }))
  }
  return { rules, problems }
}

// RFC 3986 §2.3 unreserved characters: ALPHA / DIGIT / "-" / "." / "_" / "~".
// Stryker disable next-line Regex: it tests one character, which both anchors or neither match alike
const UNRESERVED = /^[A-Za-z0-9\-._~]$/

/**
 * The path of a request target (before `?`) as it is matched, never as it is forwarded:
 * percent-encoded unreserved characters and `%2F` decoded (so `/v2/store/products/%63atalog`
 * and `/v2/store/products%2Fcatalog` are the catalog), split on `/`, each segment without
 * its `;parameters`, and empty segments dropped (so a trailing `/` or a `//` changes
 * nothing). A quota guard errs on the side of counting: many servers treat all of these
 * as the same resource, and a request wrongly counted costs less than a quota overrun.
 */
export function matchSegments (target: string): string[] {
  const queryAt = target.indexOf('?')
  let path = queryAt === -1 ? target : target.slice(0, queryAt)
  if (path.includes('%')) {
    path = path.replace(/%([0-9A-Fa-f]{2})/g, (escape, hex: string) => {
      const c = String.fromCharCode(parseInt(hex, 16))
      return UNRESERVED.test(c) || c === '/' ? c : escape
    })
  }
  const segments: string[] = []
  for (const raw of path.split('/')) {
    const paramsAt = raw.indexOf(';')
    const segment = paramsAt === -1 ? raw : raw.slice(0, paramsAt)
    if (segment !== '') segments.push(segment)
  }
  return segments
}

/** Whether a rule's method applies to a request's: `*` to any, `GET` to `HEAD` too (the gateway counts both). */
function methodMatches (ruleMethod: string, method: string): boolean {
  return ruleMethod === '*' || ruleMethod === method || (ruleMethod === 'GET' && method === 'HEAD')
}

/** Whether every request `method` + `segments` (a later rule's pattern) could match is matched by `earlier`. */
function covers (earlier: Rule, method: string, segments: readonly string[]): boolean {
  if (!methodMatches(earlier.method, method)) return false
  const pattern = earlier.segments
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]
    if (p === '**') return true
    const s = segments[i]
    if (s === undefined || s === '**') return false
    // A later `*` is wider than an earlier literal: p !== s says so too.
    if (p !== '*' && p !== s) return false
  }
  return segments.length === pattern.length
}

function segmentsMatch (pattern: readonly string[], segments: readonly string[]): boolean {
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]
    // `**` (last only) matches zero or more segments.
    if (p === '**') return true
    const s = segments[i]
    if (s === undefined) return false
    // `*` is one non-empty segment: matchSegments never yields an empty one.
    if (p !== '*' && p !== s) return false
  }
  return segments.length === pattern.length
}

/** The first rule (in the order given) that matches the request, or undefined. */
export function matchRule (rules: readonly Rule[], method: string, target: string): Rule | undefined {
  if (rules.length === 0) return undefined
  const segments = matchSegments(target)
  for (const rule of rules) {
    if (methodMatches(rule.method, method) && segmentsMatch(rule.segments, segments)) return rule
  }
  return undefined
}

/** The longest window of any limit of the rules (0: none). */
export function longestWindowMs (rules: readonly Rule[]): number {
  return Math.max(0, ...rules.flatMap((rule) => rule.limits.map((limit) => limit.windowMs)))
}
