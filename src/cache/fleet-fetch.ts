// One fetch per key for the whole fleet, which cannot race the budget.
// Deciding "this sidecar fetches" is a claim in Redis taken atomically, and only while no newer
// entry is stored: only the claimant asks its budget and goes to TI. Every other sidecar's
// request for the key waits for that fetch (looking every FLEET_POLL_MS) and gets its answer
// from Redis, or its failure, which the claimant leaves in the claim's place for a moment. The
// claim is a lease, renewed while the fetch runs: a claimant that dies lets it lapse within
// LEASE_MS, and one of the waiters claims next. A stale entry's refresh is claimed the same way.
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Clock } from '../clock.js'
import { lifetimeMs, type Entry } from './entries.js'
import type { Failure, FlightResult } from './flights.js'
import type { CacheKey } from './policy.js'

/** How long a claim lasts unless its fetch renews it (every third of it). */
export const LEASE_MS = 5_000
/** How long a failed fetch's failure stays in its claim's place for the fleet's waiters to see. */
export const FAILURE_SHOWN_MS = 1_000
/** How often a request waiting for another sidecar's fetch looks for its outcome in Redis. */
export const FLEET_POLL_MS = 50
/** An entry in Redis counts as newer than a copy held here when its key has this much longer to live. */
const NEWER_BY_MS = 1_000
/** The knownLeftMs of a request that found a value in Redis it cannot use: that value is no newer entry. */
const IGNORE_STORED = -2

// KEYS: claim, entry. ARGV: claim value, lease ms, how long the caller's own copy has left (-1: none;
// IGNORE_STORED: the value stored is one it cannot use, and is no news).
// 'stored' when a newer entry is there; the claim's value when another holds it (a live claim,
// or a failure left in its place); else the claim is this caller's.
const CLAIM = `
local left = redis.call('PTTL', KEYS[2])
local known = tonumber(ARGV[3])
if known ~= ${IGNORE_STORED} and left > 0 and (known < 0 or left > known + ${NEWER_BY_MS}) then return 'stored' end
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 'claimed'`
// KEYS: claim. ARGV: claim value, lease ms. Renews the lease while it is still this caller's.
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])`
// KEYS: claim. ARGV: claim value, what takes its place ('' none), for how long.
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then return redis.call('DEL', KEYS[1]) end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`

const FAILED = 'failed:'

/** TI's answer as another sidecar can send it: the failure itself, or the sidecar's error answer. */
export type FailureAnswer = Extract<Failure, { answer: unknown }>['answer']

/** A failure as the answer its waiters get (an error as the sidecar's JSON error answer). */
export function failureAnswer (failure: Failure): FailureAnswer {
  if ('answer' in failure) return failure.answer
  const error = failure.error as Error & { statusCode?: number, code?: string, retryAfterSeconds?: number }
  const own = typeof error.code === 'string' && typeof error.statusCode === 'number'
  const retryAfter = failure.retryAfterSeconds ?? error.retryAfterSeconds
  return {
    statusCode: own ? error.statusCode ?? 500 : 500,
    headers: { 'content-type': 'application/json; charset=utf-8', ...(retryAfter === undefined ? {} : { 'retry-after': String(retryAfter) }) },
    body: Buffer.from(JSON.stringify(own
      ? { error: error.code, message: error.message }
      : { error: 'INTERNAL_ERROR', message: 'the sidecar failed to handle the request' }))
  }
}

/** The sidecar's errors that TI or the fleet's budget caused, as opposed to this sidecar's own state. */
const FLEET_WIDE_ERRORS: ReadonlySet<string> = new Set(['UPSTREAM_UNREACHABLE', 'UPSTREAM_TIMEOUT', 'UPSTREAM_BAD_RESPONSE', 'UPSTREAM_RATE_LIMITED'])

/**
 * Whether a failed fetch is every sidecar's answer: TI's own, or TI unreachable, slow or
 * refusing, or the shared budget spent. Not this sidecar's own trouble (no token of its own,
 * its egress proxy, its overload, its shutdown, a budget it could not check: `own`): another
 * sidecar's waiters fetch for themselves.
 */
export function fleetWide (failure: Failure): boolean {
  if ('answer' in failure) return true
  if (failure.own === true) return false
  const code = (failure.error as { code?: unknown }).code
  return typeof code === 'string' && FLEET_WIDE_ERRORS.has(code)
}

export function encodeFailure (failure: Failure): string {
  const { statusCode, headers, body } = failureAnswer(failure)
  return FAILED + JSON.stringify({ statusCode, headers, body: body.toString('base64') })
}

/** A failure another sidecar left; undefined for anything else (a live claim, or what does not decode). */
export function decodeFailure (value: string): Failure | undefined {
  if (!value.startsWith(FAILED)) return undefined
  try {
    const { statusCode, headers, body } = JSON.parse(value.slice(FAILED.length)) as Record<string, unknown>
    if (typeof statusCode !== 'number' || typeof body !== 'string' || typeof headers !== 'object' || headers === null) return undefined
    return { answer: { statusCode, headers: headers as FailureAnswer['headers'], body: Buffer.from(body, 'base64') } }
  } /* Stryker disable next-line BlockStatement: equivalent: an empty catch returns undefined too */ catch {
    return undefined
  }
}

/** What a claim found: this caller fetches, a newer entry is stored, or another holds the key (a live fetch, or its failure). */
export type Claim = { kind: 'claimed' } | { kind: 'stored' } | { kind: 'held', failure?: Failure }

/** The claims' commands in Redis, on the cache's connection (so an entry stored goes before its claim's release). */
export function createFleetClaims ({ client, entryKey, claimKey, ready }: {
  client: Redis
  entryKey: (id: string) => string
  claimKey: (id: string) => string
  ready: () => void
}) {
  return {
    async claim (id: string, value: string, knownLeftMs: number): Promise<Claim> {
      ready()
      const reply = String(await client.eval(CLAIM, 2, claimKey(id), entryKey(id), value, LEASE_MS, Math.round(knownLeftMs)))
      if (reply === 'claimed' || reply === 'stored') return { kind: reply }
      const failure = decodeFailure(reply)
      return failure === undefined ? { kind: 'held' } : { kind: 'held', failure }
    },
    async renew (id: string, value: string): Promise<void> {
      ready()
      await client.eval(RENEW, 1, claimKey(id), value, LEASE_MS)
    },
    async release (id: string, value: string, failure: Failure | undefined): Promise<void> {
      ready()
      await client.eval(RELEASE, 1, claimKey(id), value, failure === undefined ? '' : encodeFailure(failure), FAILURE_SHOWN_MS)
    },
    /** Whether a newer entry is stored, and what holds the claim: nothing, a live fetch, or its failure. */
    async look (id: string, knownLeftMs: number): Promise<{ stored: boolean, held: 'none' | 'live' | Failure }> {
      ready()
      // Stryker disable next-line ArrayDeclaration: equivalent: exec() of a pipeline without MULTI always resolves a list (null is an aborted transaction's)
      const replies = await client.pipeline().pttl(entryKey(id)).get(claimKey(id)).exec() ?? []
      for (const [err] of replies) if (err != null) throw err
      const left = Number(replies[0]?.[1])
      const value = replies[1]?.[1] as string | null | undefined
      const stored = knownLeftMs !== IGNORE_STORED && left > 0 && (knownLeftMs < 0 || left > knownLeftMs + NEWER_BY_MS)
      return { stored, held: value == null ? 'none' : decodeFailure(value) ?? 'live' }
    }
  }
}

export type FleetClaims = ReturnType<typeof createFleetClaims>

/** Where a request stands once the fleet was asked: it fetches, or the fleet's fetch gave an entry or a failure, or its caller left. */
export type Turn =
  | { readonly kind: 'fetch' }
  | { readonly kind: 'entry', readonly entry: Entry }
  | { readonly kind: 'failure', readonly failure: Failure }
  | { readonly kind: 'gone' }

const FETCH: Turn = Object.freeze({ kind: 'fetch' })
const GONE: Turn = Object.freeze({ kind: 'gone' })

/** The caller's side of an exchange: it emits 'close' when the caller leaves. */
interface Caller {
  readonly destroyed: boolean
  once: (event: 'close', listener: () => void) => unknown
  removeListener: (event: 'close', listener: () => void) => unknown
}

export interface FleetFetchOptions {
  claims: FleetClaims
  clock: Clock
  /** The longest a fetch may take: how long a request waits for another sidecar's. */
  fillMs: number
  /** The stored answer for a request (read-cache.ts's find: memory, then Redis). */
  find: (key: CacheKey, headers: Record<string, string | string[] | undefined>) => Promise<{ entry: Entry | undefined }>
  /** Redis failed: counted and logged by the cache; the request fetches by itself. */
  failed: (err: unknown, what: string) => void
}

export function createFleetFetch ({ claims, clock, fillMs, find, failed }: FleetFetchOptions) {
  /** The claims this sidecar holds: their value, and the timer that renews them. */
  const held = new Map<string, { value: string, cancel: () => void }>()
  // A claim's value is this run's alone (every container's sidecar may be pid 1): a renewal or
  // a release touches only its own claim.
  const run = randomUUID()
  let claimsMade = 0

  function renewLater (id: string, value: string): () => void {
    return clock.setTimer(() => {
      const claim = held.get(id)
      if (claim?.value !== value) return
      claim.cancel = renewLater(id, value)
      claims.renew(id, value).catch((err: unknown) => { failed(err, 'a fetch claim\'s renewal') })
    }, LEASE_MS / 3)
  }

  function hold (id: string, value: string): void {
    held.set(id, { value, cancel: renewLater(id, value) })
  }

  /** A newer entry the fleet stored for this request, if it is usable here (TI's Vary agrees). */
  async function storedEntry (key: CacheKey, headers: Record<string, string | string[] | undefined>, found: Entry | undefined): Promise<Turn> {
    const { entry } = await find(key, headers)
    return entry !== undefined && entry !== found ? { kind: 'entry', entry } : FETCH
  }

  /** Waits while another sidecar holds the claim: 'lapsed' when it is gone with nothing to show. */
  function waitForClaim (key: CacheKey, knownLeftMs: number, caller: Caller, deadline: number): Promise<Turn | 'lapsed' | 'stored'> {
    return new Promise((resolve) => {
      let finished = false
      let cancel = (): void => {}
      // Again (a look that lands after the caller left) it changes nothing: each step is idempotent.
      const finish = (outcome: Turn | 'lapsed' | 'stored'): void => {
        finished = true
        cancel()
        caller.removeListener('close', left)
        resolve(outcome)
      }
      const left = (): void => { finish(GONE) }
      caller.once('close', left)
      const look = (): void => {
        claims.look(key.id, knownLeftMs).then(({ stored, held }) => {
          if (stored) finish('stored')
          else if (held === 'none') finish('lapsed')
          else if (held !== 'live') finish({ kind: 'failure', failure: held })
          else if (clock.now() >= deadline) finish(FETCH)
          else if (!finished) cancel = clock.setTimer(look, FLEET_POLL_MS)
        }, (err: unknown) => {
          failed(err, 'a look at the fleet\'s fetch')
          finish(FETCH)
        })
      }
      cancel = clock.setTimer(look, FLEET_POLL_MS)
    })
  }

  return {
    /**
     * Asks the fleet before this request fetches `key` (`found`: the copy it would refresh):
     * claims the fetch (then it fetches), or waits for the claimant's entry or failure. With
     * Redis failing, or a claimant slower than a whole fetch, it fetches by itself.
     */
    async turn (key: CacheKey, headers: Record<string, string | string[] | undefined>, found: Entry | undefined, caller: Caller,
      unusable = false): Promise<Turn> {
      const knownLeftMs = found !== undefined ? Math.max(0, lifetimeMs(found) - (clock.now() - found.storedAt)) : unusable ? IGNORE_STORED : -1
      const deadline = clock.now() + fillMs
      for (;;) {
        // Claims that came and went without an answer for this request: it has waited a whole fetch's time.
        if (clock.now() >= deadline) return FETCH
        // Stryker disable next-line UpdateOperator: equivalent: counting down gives each claim a value of its own too
        const value = `fetch:${run}:${++claimsMade}`
        let claim: Claim
        try {
          claim = await claims.claim(key.id, value, knownLeftMs)
        } catch (err) {
          failed(err, 'a fetch claim')
          // A claim that timed out may still run once Redis catches up: this request fetches
          // anyway, so the claim is held as its own, renewed and released when the fetch ends
          // (by its value: a no-op where it never ran), never left holding the key for a lease.
          hold(key.id, value)
          return FETCH
        }
        if (caller.destroyed) {
          if (claim.kind === 'claimed') claims.release(key.id, value, undefined).catch((err: unknown) => { failed(err, 'a fetch claim\'s release') })
          return GONE
        }
        if (claim.kind === 'claimed') {
          hold(key.id, value)
          return FETCH
        }
        if (claim.kind === 'stored') return await storedEntry(key, headers, found)
        if (claim.failure !== undefined) return { kind: 'failure', failure: claim.failure }
        const waited = await waitForClaim(key, knownLeftMs, caller, deadline)
        // Where a value stood that it cannot use, the claimant's entry is seen only once its claim is gone.
        if (waited === 'stored' || (waited === 'lapsed' && unusable)) return await storedEntry(key, headers, found)
        if (waited !== 'lapsed') return waited
      }
    },

    /**
     * This sidecar's fetch of `id` ended: its claim goes, or its failure takes the claim's place
     * for a moment, if it is the fleet's too (fleetWide).
     */
    ended (id: string, result: FlightResult): void {
      const claim = held.get(id)
      if (claim === undefined) return
      held.delete(id)
      claim.cancel()
      const failure = result.failure !== undefined && fleetWide(result.failure) ? result.failure : undefined
      claims.release(id, claim.value, failure).catch((err: unknown) => { failed(err, 'a fetch claim\'s release') })
    },

    /** Stops renewing every claim (shutting down): they lapse. */
    close (): void {
      for (const claim of held.values()) claim.cancel()
      held.clear()
    }
  }
}

export type FleetFetch = ReturnType<typeof createFleetFetch>
