// What the read cache may store and reuse, as pure functions: the key of a request, whether an
// answer of TI's may be stored and for how long, and the Cache-Status (RFC 9211) and Age it is
// served with. HTTP's rules for a shared cache (RFC 9111: no-store, private, Authorization,
// the status codes) come from http-cache-semantics; the rule's `cache=` and `stale=` bound them.
import { createHash } from 'node:crypto'
import CachePolicy from 'http-cache-semantics'
import type { CacheOption } from '../config/rate-limit-rules.js'

type Headers = Record<string, string | string[] | undefined>

/** The request headers that always take part in the key: they change TI's answer. */
export const KEYED_HEADERS = ['accept', 'accept-language', 'accept-encoding'] as const

/** The name the cache gives itself in Cache-Status. */
export const CACHE_NAME = 'store-auth-proxy'

export interface CacheKey {
  /** A digest of everything keyed: the upstream, the path and query as forwarded, and the KEYED_HEADERS. */
  readonly id: string
  /** A digest of the target URI alone (the upstream, the path and query): what a write invalidates, whatever the headers. */
  readonly uri: string
  /** The path with the query's values left out (they may be personal): for /status. */
  readonly display: string
}

const headerValue = (value: Headers[string]): string => Array.isArray(value) ? value.join(', ') : value ?? ''

/**
 * The key of a GET or HEAD request forwarded to `upstream` (UPSTREAM_URL: sidecars on one
 * credential may front different store APIs) as `path` (path and query as they go upstream).
 */
export function cacheKey (upstream: string, path: string, headers: Headers): CacheKey {
  const hash = createHash('sha256').update(`${upstream}\n${path}`)
  for (const name of KEYED_HEADERS) hash.update(`\n${headerValue(headers[name])}`)
  return { id: hash.digest('hex').slice(0, 32), uri: uriKey(upstream, path), display: displayPath(path) }
}

/** The digest of a target URI: every stored answer of it, whatever its keyed headers, carries it. */
export function uriKey (upstream: string, path: string): string {
  return createHash('sha256').update(`${upstream}\n${path}`).digest('hex').slice(0, 32)
}

/** Methods that change nothing (RFC 9110 §9.2.1): every other one may, whether it is known or not. */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE'])

/**
 * The target URIs whose stored answers an answer to `method` on `path` invalidates (RFC 9111
 * §4.4): none for a safe method or an error; else the target, and its Location and
 * Content-Location when they name the same origin (another origin's may not be touched).
 */
export function invalidatedUris (upstream: string, method: string, path: string, statusCode: number, headers: Headers): string[] {
  if (SAFE_METHODS.has(method) || statusCode < 200 || statusCode > 399) return []
  const origin = new URL(upstream).origin
  const paths = new Set([path])
  for (const name of ['location', 'content-location']) {
    const value = headers[name]
    if (typeof value !== 'string') continue
    let target: URL
    try {
      target = new URL(value, origin + path)
    } catch {
      continue
    }
    if (target.origin === origin) paths.add(target.pathname + target.search)
  }
  return [...paths].map((p) => uriKey(upstream, p))
}

/** `/v2/x?page=2&q=me` → `/v2/x?page=…&q=…`: the names of the query's fields, never their values. */
export function displayPath (path: string): string {
  const queryAt = path.indexOf('?')
  if (queryAt === -1) return path
  // A field without `=` is all value (`?jane.doe@example.com`): it shows as … alone.
  const names = path.slice(queryAt + 1).split('&').filter((p) => p !== '').map((p) => p.includes('=') ? `${p.slice(0, p.indexOf('='))}=…` : '…')
  return `${path.slice(0, queryAt)}?${names.join('&')}`
}

/** Cache-Control's directives, lower-cased, with their values (true when they have none). */
export function directives (value: Headers[string]): Map<string, string | true> {
  const found = new Map<string, string | true>()
  for (const part of headerValue(value).split(',')) {
    const at = part.indexOf('=')
    const key = (at === -1 ? part : part.slice(0, at)).trim().toLowerCase()
    // A repeated directive counts once, as it first came (RFC 9111 §4.2.1).
    if (key === '' || found.has(key)) continue
    found.set(key, at === -1 ? true : part.slice(at + 1).trim().replace(/^"(.*)"$/, '$1'))
  }
  return found
}

/** Whether a caller asks for TI's answer, not a stored one (`Cache-Control: no-cache` or `max-age=0`). */
export function asksForFresh (headers: Headers): boolean {
  const cc = directives(headers['cache-control'])
  return cc.has('no-cache') || cc.get('max-age') === '0'
}

/** Request headers that make TI's answer to a fetch this request's own: a part, or a condition. */
const OWN_ANSWER_HEADERS = ['range', 'if-range', 'if-match', 'if-none-match', 'if-modified-since', 'if-unmodified-since'] as const

/**
 * Whether TI's refusal of this request's fetch (a 416 for its Range, a 412 for its If-Match)
 * may be its own: such an answer is not every waiter's, here or in the fleet.
 */
export function asksForItsOwn (headers: Headers): boolean {
  return OWN_ANSWER_HEADERS.some((name) => headers[name] !== undefined)
}

/** Whether a request may be answered from the cache at all: a caller's Cookie may make TI's answer personal. */
export function requestCacheable (method: string, headers: Headers): boolean {
  return (method === 'GET' || method === 'HEAD') && headers.cookie === undefined && !directives(headers['cache-control']).has('no-store')
}

/** Why an answer is not stored. */
export type NotStored = 'status' | 'no-store' | 'private' | 'no-cache' | 'set-cookie' | 'vary' | 'expired' | 'too-large' | 'busy'

export type Decision =
  | {
    readonly store: true
    /** How long the answer is fresh from now: the rule's `cache=`, or less if TI's max-age says so. */
    readonly freshMs: number
    /** How long beyond that it may stand in when TI cannot be asked: `stale=`, 0 when TI forbids it. */
    readonly staleMs: number
    /** Its age when it arrived (TI's Age header). */
    readonly initialAgeMs: number
    /** The request headers TI's Vary names beyond KEYED_HEADERS, with digests of this request's values (never the values). */
    readonly vary: ReadonlyArray<readonly [string, string]>
  }
  | { readonly store: false, readonly why: NotStored }

/**
 * Whether TI's answer to a GET may be stored for the rule's `cache=`, and how long. Only 200s:
 * a 404 may be TI's answer to a product not yet listed, or Apigee's for a path it does not
 * route, and reusing it for hours would hide the product once it appears.
 */
export function decide (option: CacheOption, path: string, requestHeaders: Headers, statusCode: number, answerHeaders: Headers,
  now = Date.now()): Decision {
  if (statusCode !== 200) return { store: false, why: 'status' }
  const cc = directives(answerHeaders['cache-control'])
  if (cc.has('no-store')) return { store: false, why: 'no-store' }
  if (cc.has('private')) return { store: false, why: 'private' }
  // Must be revalidated on every use: each revalidation would cost a budget point anyway.
  if (cc.has('no-cache')) return { store: false, why: 'no-cache' }
  if (answerHeaders['set-cookie'] !== undefined) return { store: false, why: 'set-cookie' }
  const varyNames = headerValue(answerHeaders.vary).split(',').map((n) => n.trim().toLowerCase()).filter((n) => n !== '')
  if (varyNames.includes('*')) return { store: false, why: 'vary' }
  // The request TI answered, as the cache sees it: the caller's headers (the sidecar's own
  // Authorization is what makes it TI's answer to us; the key carries the credential).
  // http-cache-semantics reads each field as one string: a repeated field is joined as HTTP
  // joins it (RFC 9110 §5.3), never passed as a list.
  const { authorization: _ours, ...callerHeaders } = requestHeaders
  const policy = new CachePolicy(
    { method: 'GET', url: path, headers: joined(callerHeaders) },
    { status: statusCode, headers: joined(answerHeaders) },
    // shared: false would store the same: decide refuses `private` and drops Authorization itself, and a 200 is storable by default.
    // Stryker disable next-line ObjectLiteral,BooleanLiteral: the library's defaults today, written out so that a change of them cannot change what is stored
    { shared: true, cacheHeuristic: 0 })
  if (!policy.storable()) return { store: false, why: 'no-store' }
  const initialAgeMs = ageSeconds(answerHeaders.age) * 1000
  const lifetime = freshnessLifetimeMs(cc, answerHeaders, now)
  // Freshness left on arrival: TI's lifetime less the age it gave (RFC 9111 §4.2.3; no time has passed here yet).
  const freshMs = Math.min(option.freshMs, lifetime === undefined ? Infinity : Math.max(0, lifetime - initialAgeMs))
  // A shared cache MUST NOT serve these stale without revalidating (§5.2.2.2, .8, .10: s-maxage
  // carries proxy-revalidate's meaning), and this cache never revalidates: so never stale.
  const staleMs = cc.has('must-revalidate') || cc.has('proxy-revalidate') || cc.has('s-maxage') ? 0 : option.staleMs
  if (freshMs <= 0 && staleMs <= 0) return { store: false, why: 'expired' }
  // Authorization and Host are the sidecar's own on every request TI sees: the same for all callers.
  const vary = varyNames
    .filter((n) => !(KEYED_HEADERS as readonly string[]).includes(n) && n !== 'authorization' && n !== 'host')
    .map((n) => [n, varyDigest(requestHeaders[n])] as const)
  return { store: true, freshMs, staleMs, initialAgeMs, vary }
}

/**
 * TI's freshness lifetime for a shared cache (RFC 9111 §4.2.1), undefined when it states none:
 * s-maxage, else max-age, else Expires less Date (the time of arrival when Date is not valid).
 * One that is not a valid delta-seconds or HTTP-date (a repeated Expires included) is already
 * expired (§4.2.1, §5.3).
 */
export function freshnessLifetimeMs (cc: Map<string, string | true>, headers: Headers, now: number): number | undefined {
  const max = cc.get('s-maxage') ?? cc.get('max-age')
  if (max !== undefined) return (deltaSeconds(max) ?? 0) * 1000
  if (headers.expires === undefined) return undefined
  const expires = httpDate(headerValue(headers.expires), now)
  if (expires === undefined) return 0
  return Math.max(0, expires - (httpDate(headerValue(headers.date), now) ?? now))
}

/** RFC 9111 §1.2.2: a delta-seconds past what can be represented counts as 2^31. */
const DELTA_SECONDS_MAX = 2_147_483_648

/** A delta-seconds value (digits only), or undefined when it is not one. */
function deltaSeconds (value: string | true): number | undefined {
  return typeof value === 'string' && /^\d+$/.test(value) ? Math.min(Number(value), DELTA_SECONDS_MAX) : undefined
}

/** The Age TI gave, in seconds: its first member when it is a list, none when not a delta-seconds (RFC 9111 §5.1). */
export function ageSeconds (value: Headers[string]): number {
  return deltaSeconds(headerValue(value).split(',')[0]!.trim()) ?? 0
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec']
const MONTH = `(${MONTHS.join('|')})`
const TIME = '(\\d{2}):(\\d{2}):(\\d{2})'
const IMF_FIXDATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\\d{2}) ${MONTH} (\\d{4}) ${TIME} GMT$`)
const RFC850_DATE = new RegExp(`^(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\\d{2})-${MONTH}-(\\d{2}) ${TIME} GMT$`)
const ASCTIME_DATE = new RegExp(`^(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ${MONTH} ( \\d|\\d{2}) ${TIME} (\\d{4})$`)

/**
 * An HTTP-date (RFC 9110 §5.6.7) in ms, or undefined when it is not one: IMF-fixdate, or the
 * obsolete RFC 850 and asctime forms, exactly (`UTC` for `GMT`, a missing comma, a one-digit
 * hour are not dates). An RFC 850 year more than 50 years ahead of `now` is a past one.
 */
export function httpDate (value: string, now: number): number | undefined {
  let fields: Array<string | undefined>
  let m: RegExpExecArray | null
  if ((m = IMF_FIXDATE.exec(value)) !== null) fields = m.slice(1)
  else if ((m = RFC850_DATE.exec(value)) !== null) fields = m.slice(1)
  else if ((m = ASCTIME_DATE.exec(value)) !== null) fields = [m[2], m[1], m[6], m[3], m[4], m[5]]
  else return undefined
  const [day, month, year, hour, minute, second] = fields as [string, string, string, string, string, string]
  let fullYear = Number(year)
  if (year.length === 2) {
    const thisYear = new Date(now).getUTCFullYear()
    fullYear += thisYear - thisYear % 100
    if (fullYear > thisYear + 50) fullYear -= 100
  }
  if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 60) return undefined
  const date = new Date(0)
  date.setUTCFullYear(fullYear, MONTHS.indexOf(month), Number(day))
  // 31 Feb, or a day 00: not a date.
  if (date.getUTCDate() !== Number(day)) return undefined
  date.setUTCHours(Number(hour), Number(minute), Number(second))
  return date.getTime()
}

function joined (headers: Headers): Record<string, string> {
  const out: Record<string, string> = {}
  // A field typed undefined (never one from Node's or undici's parser) reads as empty: to storable(), as absent.
  for (const [name, value] of Object.entries(headers)) out[name] = headerValue(value)
  return out
}

/** A Vary'd header's value as it is kept: a digest, so a stored answer never holds a caller's header (a credential, say). */
function varyDigest (value: Headers[string]): string {
  // Stryker disable next-line MethodExpression: 22 characters (132 bits) is a size choice; the whole digest keys the same
  return value === undefined ? '' : createHash('sha256').update(headerValue(value)).digest('base64url').slice(0, 22)
}

/** Whether a stored answer's Vary headers match a request's. */
export function varyMatches (vary: ReadonlyArray<readonly [string, string]>, headers: Headers): boolean {
  return vary.every(([name, digest]) => varyDigest(headers[name]) === digest)
}

/** Cache-Status parameters (RFC 9211 §2). */
export interface StatusParams {
  hit?: boolean
  fwd?: 'miss' | 'stale' | 'request' | 'bypass'
  fwdStatus?: number
  stored?: boolean
  /** Freshness left, in seconds: negative once stale. */
  ttlSeconds?: number
  detail?: string
}

/** The Cache-Status field value, e.g. `store-auth-proxy; hit; ttl=3540` or `store-auth-proxy; fwd=miss; stored`. */
export function cacheStatus ({ hit, fwd, fwdStatus, stored, ttlSeconds, detail }: StatusParams): string {
  let value = CACHE_NAME
  if (hit === true) value += '; hit'
  if (fwd !== undefined) value += `; fwd=${fwd}`
  if (fwdStatus !== undefined) value += `; fwd-status=${fwdStatus}`
  if (stored === true) value += '; stored'
  if (ttlSeconds !== undefined) value += `; ttl=${ttlSeconds}`
  if (detail !== undefined) value += `; detail=${detail}`
  return value
}

/** A Cache-Status value with the ones TI's side sent after it (RFC 9211 §2: the one nearest the caller first). */
export function withUpstream (ours: string, theirs: Headers[string]): string {
  if (theirs === undefined) return ours
  return [ours, ...(Array.isArray(theirs) ? theirs : [theirs])].join(', ')
}
