// One request that goes upstream for the read cache (a fill), from TI's status line to the
// caller's answer: whether TI's answer may be stored, what the caller is told in Cache-Status,
// and when a stored answer stands in for TI's failure (RFC 5861's stale-if-error). Everyone
// waiting for the fill gets its outcome through `settle`, whatever became of its own caller.
import type { CacheOption, Rule } from '../config/rate-limit-rules.js'
import type { Entry } from './entries.js'
import type { Failure, Flight } from './flights.js'
import { cacheStatus, decide, withUpstream, type CacheKey, type Decision, type StatusParams } from './policy.js'
import type { CacheResult, ReadCache } from './read-cache.js'

type Headers = Record<string, string | string[] | undefined>

export interface Fill {
  readonly key: CacheKey
  readonly rule: Rule & { cache: CacheOption }
  /** The path and query as forwarded, and the caller's headers: what TI answered. */
  readonly path: string
  readonly requestHeaders: Headers
  /** The caller's method: a HEAD is fetched as a GET (its answer stored), and answered with the headers only. */
  readonly method: string
  /** The stored answer it refreshes (stale, or fresh when the caller asked for TI's): it stands in if TI fails. */
  readonly found: Entry | undefined
  /** Its headers ask for a part or a condition (asksForItsOwn): TI's 4xx may be for it alone. */
  readonly ownAnswer: boolean
  /** How it asked: `miss` (nothing stored), `stale`, `request` (the caller's no-cache). */
  readonly fwd: 'miss' | 'stale' | 'request'
  /** The flight this request leads: its waiters get what it stores, or go on by themselves. */
  readonly flight: Flight
  decision: Decision | undefined
  /** TI's own Cache-Status (a cache on its side), kept apart from the one added for a pass-through. */
  upstreamStatus?: string | string[]
  /** What its own caller got from the cache, set before the flight settles (none: a miss): counted once, as the flight ends. */
  servedAs: CacheResult | undefined
}

/**
 * This request fetches `what.key` for every request here that asks meanwhile: undefined if one
 * does already (join it). Its own caller's cache result is counted once, as its flight ends,
 * whatever ended it: a miss unless a stored answer served it (`servedAs`).
 */
export function leadFill (cache: ReadCache, what: Omit<Fill, 'flight' | 'decision' | 'servedAs'>): Fill | undefined {
  const flight = cache.lead(what.key.id, () => { cache.counted(what.rule.id, fill.servedAs ?? 'miss') })
  if (flight === undefined) return undefined
  const fill: Fill = { ...what, flight, decision: undefined, servedAs: undefined }
  return fill
}

/** Serves a stored answer to one caller (the request path hijacks its reply first). */
export type Serve = (entry: Entry, params: StatusParams, result: CacheResult) => void

/** TI's status line and headers arrived: decide whether the answer will be stored, and label them for a pass-through. */
export function fillAnswered (cache: ReadCache, fill: Fill, statusCode: number, headers: Headers): void {
  let decision = decide(fill.rule.cache, fill.path, fill.requestHeaders, statusCode, headers)
  // Held whole while it arrives, within the flights' share of CACHE_MAX_BYTES; beyond it, passed on.
  if (decision.store && !fill.flight.reserve(Math.min(cache.entryMaxBytes, Number(headers['content-length'] ?? cache.entryMaxBytes) || cache.entryMaxBytes))) {
    decision = { store: false, why: 'busy' }
  }
  fill.decision = decision
  if (!decision.store && decision.why !== 'status') cache.notStored(fill.rule.id, decision.why)
  // What the caller sees if the answer is passed on as it comes: not stored, and why (a
  // storable one is passed on only if it outgrows CACHE_ENTRY_MAX_BYTES).
  const detail = !decision.store && decision.why === 'status' ? undefined : decision.store ? 'too-large' : decision.why
  // Ours first, before any cache's on TI's side (RFC 9211 §2): written with TI's headers.
  const upstream = headers['cache-status']
  if (upstream === undefined) delete fill.upstreamStatus
  else fill.upstreamStatus = upstream
  headers['cache-status'] = withUpstream(cacheStatus({ fwd: fill.fwd, fwdStatus: statusCode, ...(detail === undefined ? {} : { detail }) }), headers['cache-status'])
}

/**
 * How much of TI's answer to hold back whole: all of a storable one, or a failure (a stored
 * answer may replace it, and everyone waiting for this fetch gets it: a 401 is the replay's).
 */
export function fillHolds (cache: ReadCache, fill: Fill, statusCode: number): number | boolean {
  if (fill.decision?.store === true) return cache.entryMaxBytes
  // forward.ts's own limit for a held-back answer (HOLD_BACK_MAX_BYTES).
  return statusCode >= 400 && statusCode !== 401
}

/**
 * TI's held-back answer, whole: stored and served, or replaced by the stored answer when
 * TI failed. False when the caller should get TI's answer as it came.
 */
export function fillHeld (cache: ReadCache, fill: Fill, answer: { statusCode: number, headers: Headers, body: Buffer },
  serve: Serve | undefined): boolean {
  const decision = fill.decision
  if (decision?.store === true && answer.statusCode === 200) {
    // Stored as TI sent it: its own Cache-Status only (ours is added each time it is served).
    const { 'cache-status': _ours, ...headers } = answer.headers
    const entry = cache.store(fill.key, fill.rule.id, decision, { ...answer, headers: { ...headers, 'cache-status': fill.upstreamStatus } })
    fill.flight.settle(entry)
    if (entry === undefined) return false
    serve?.(entry, { fwd: fill.fwd, fwdStatus: 200, stored: true }, 'miss')
    return true
  }
  if (standsIn(cache, fill) && (answer.statusCode >= 500 || answer.statusCode === 429)) {
    standIn(fill, serve, { answer }, { hit: true, fwd: 'stale', fwdStatus: answer.statusCode, detail: 'stale-error' })
    return true
  }
  // TI's failure is every waiter's answer, but for what the fetch's own Range or condition
  // caused (416, 412); that, or a success not stored, lets them fetch again. A 404 is a 404
  // whatever validator asked (clients with a cache of their own send one on every GET).
  const itsOwn = fill.ownAnswer && (answer.statusCode === 412 || answer.statusCode === 416)
  if (answer.statusCode >= 400 && !itsOwn) fill.flight.fail({ answer })
  else fill.flight.settle(undefined)
  return false
}

/**
 * TI could not be reached, or failed before its status line (or the fetch could not be sent):
 * the stored answer stands in if it may, else `failure` answers every waiter.
 */
export function fillFailed (cache: ReadCache, fill: Fill, serve: Serve | undefined, failure: Failure): boolean {
  if (!standsIn(cache, fill)) {
    fill.flight.fail(failure)
    return false
  }
  standIn(fill, serve, failure, { hit: true, fwd: 'stale', detail: 'stale-error' })
  return true
}

/** Whether the stored answer being refreshed may still stand in (within stale=). */
function standsIn (cache: ReadCache, fill: Fill): fill is Fill & { found: Entry } {
  return fill.found !== undefined && cache.standing(fill.found).usable
}

/** The stored answer stands in for TI's failure: for everyone waiting, and for the fill's own caller (counted stale, there or not). */
function standIn (fill: Fill & { found: Entry }, serve: Serve | undefined, failure: Failure, params: StatusParams): void {
  fill.servedAs = 'stale'
  fill.flight.settle(fill.found, true, failure)
  serve?.(fill.found, params, 'stale')
}
