// The read cache: TI's answers to GETs of rules with `cache=`, reused before any budget is
// asked. Its copies live in this sidecar's memory (bounded by CACHE_MAX_BYTES, least recently
// used evicted) and, when Redis is configured, in Redis for the whole fleet. Concurrent misses
// for one key make one upstream call: the first request fetches (a flight), the others wait
// for its answer. What is admitted, refused or counted is still the quota guard's business
// (src/proxy/plugin.ts asks it for every fetch); nothing here sends anything upstream.
import type { ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { Metrics } from '../metrics.js'
import type { Caller } from '../quota/guard.js'
import { createMemoryStore, entrySize, lifetimeMs, standing, type Entry } from './entries.js'
import { createFlights, type Flight, type FlightOutcome } from './flights.js'
import { cacheStatus, invalidatedUris, varyMatches, withUpstream, type CacheKey, type Decision, type NotStored, type StatusParams } from './policy.js'
import type { SharedCache, StoreReply } from './redis-cache.js'

type Headers = Record<string, string | string[] | undefined>

/** How a request was answered from the cache (the metric's `result` label). */
export type CacheResult = 'hit' | 'coalesced' | 'stale' | 'miss'

export interface ReadCacheOptions {
  clock: Clock
  log: Logger
  metrics: Metrics
  /** CACHE_MAX_BYTES: this sidecar's copies, at most. */
  maxBytes: number
  /** CACHE_ENTRY_MAX_BYTES: a larger answer streams through and is not stored. */
  entryMaxBytes: number
  /** The fleet's copies in Redis (RATE_LIMIT_REDIS_URL set). */
  shared?: SharedCache
  /** The longest a fetch may take (budget wait, queue, TI's answer): how long the fleet waits for one. */
  fillMs: number
}

/** What a lookup found: a usable stored answer, if any, and whether another sidecar is fetching it now. */
export interface Lookup {
  entry: Entry | undefined
  fleetFilling: boolean
}

/** How often a request waiting for another sidecar's fetch looks for its answer in Redis. */
export const FLEET_POLL_MS = 50
/**
 * The longest a request waits for another sidecar's fetch, whatever its marker says (a sidecar
 * that died mid-fetch leaves one for up to a fetch's whole time): then it asks the budget.
 */
export const FLEET_WAIT_MAX_MS = 10_000

/** How many keys whose value in Redis was not an entry are remembered, so that each is logged once. */
export const MALFORMED_LOGGED_MAX = 1_000

export type { Flight, FlightOutcome } from './flights.js'

export interface CachedStatus {
  maxBytes: number
  entryMaxBytes: number
  bytes: number
  shared: { url: string, up: boolean } | null
  entries: Array<{ rule: string, path: string, ageSeconds: number, bytes: number, state: 'fresh' | 'stale' }>
}

export function createReadCache ({ clock, log, metrics, maxBytes, entryMaxBytes, shared, fillMs }: ReadCacheOptions) {
  const memory = createMemoryStore({ clock, maxBytes, onEvict: (entry) => { metrics.cacheEvictions.inc({ rule: entry.rule }) } })
  metrics.measureCache(() => memory.bytes())
  // Every flight ends by telling the fleet its fetch is over.
  const flights = createFlights({ holdBudgetBytes: maxBytes, onEnd: (id) => { tell(id, 1) } })
  let sharedProblem: string | undefined
  /** Tells the fleet this sidecar fetches `id` for at most `ms` (1: it is done). */
  const tell = (id: string, ms: number): void => { shared?.filling(id, ms).catch((err: unknown) => { redisFailed(err, 'a fetch notice') }) }

  // A value of another layout (a rolling update) is a miss for every request of its key until
  // a fetch replaces it: counted each time, logged once per key.
  const malformedLogged = new Set<string>()
  shared?.onMalformed((id, why) => {
    metrics.cacheRedisMalformed.inc()
    if (malformedLogged.has(id)) return
    if (malformedLogged.size >= MALFORMED_LOGGED_MAX) malformedLogged.clear()
    malformedLogged.add(id)
    log.warn({ key: id, reason: why }, 'read cache: a value in redis is not an entry of this version; taken as a miss')
  })

  function redisFailed (err: unknown, what: string): void {
    metrics.cacheRedisErrors.inc()
    const problem = shared?.describe(err) ?? String(err)
    // Once per kind of failure: a Redis that is down fails every lookup.
    if (problem !== sharedProblem) log.warn({ reason: problem }, `read cache: ${what} in redis failed; using this sidecar's copies`)
    sharedProblem = problem
  }

  /**
   * One read of `id` from Redis for every lookup that wants it meanwhile: a burst of callers on
   * a sidecar that holds no copy reads a megabyte entry once, not once each (which would keep
   * Redis busy past the budget checks' timeout, and every caller would be refused).
   */
  const reading = new Map<string, ReturnType<SharedCache['get']>>()
  function sharedLookup (from: SharedCache, id: string, ownLeftMs: number | undefined): ReturnType<SharedCache['get']> {
    const k = ownLeftMs === undefined ? id : `${id} newer`
    let read = reading.get(k)
    if (read === undefined) {
      read = from.get(id, ownLeftMs).finally(() => { reading.delete(k) })
      reading.set(k, read)
    }
    return read
  }

  /** The stored answer for a request, fresh or stale (none: none usable), and whether the fleet is fetching it. Never fails. */
  async function find (key: CacheKey, headers: Headers): Promise<Lookup> {
    const local = memory.get(key.id)
    const own = local !== undefined && varyMatches(local.vary, headers) ? local : undefined
    if (shared === undefined || (own !== undefined && standing(own, clock.now()).fresh)) return { entry: own, fleetFilling: false }
    let theirs: Entry | undefined
    let fleetFilling = false
    try {
      // A stale copy of our own: the entry is read only if Redis holds a newer one.
      const ownLeftMs = own === undefined ? undefined : lifetimeMs(own) - (clock.now() - own.storedAt)
      const found = await sharedLookup(shared, key.id, ownLeftMs)
      theirs = found.entry
      fleetFilling = found.filling
      sharedProblem = undefined
    } catch (err) {
      redisFailed(err, 'a lookup')
      return { entry: own, fleetFilling: false }
    }
    if (theirs === undefined || !varyMatches(theirs.vary, headers) || !standing(theirs, clock.now()).usable ||
      (own !== undefined && own.storedAt >= theirs.storedAt)) return { entry: own, fleetFilling }
    // Another sidecar's newer copy: kept here too, so the next hits need no Redis.
    memory.set(key.id, theirs)
    return { entry: theirs, fleetFilling }
  }

  /**
   * Waits while another sidecar fetches `key` for the fleet: its fresh answer once it is in
   * Redis, or nothing when that fetch ends without one (or takes longer than FLEET_WAIT_MAX_MS).
   */
  function awaitFleet (key: CacheKey, headers: Headers, caller: Caller): Promise<FlightOutcome> {
    const deadline = clock.now() + Math.min(fillMs, FLEET_WAIT_MAX_MS)
    return new Promise((resolve) => {
      let finished = false
      let cancel = (): void => {}
      const finish = (outcome: FlightOutcome): void => {
        if (finished) return
        finished = true
        cancel()
        caller.removeListener('close', left)
        resolve(outcome)
      }
      const left = (): void => { finish('gone') }
      caller.once('close', left)
      const look = (): void => {
        find(key, headers).then(({ entry, fleetFilling }) => {
          if (finished) return
          if (entry !== undefined && standing(entry, clock.now()).fresh) finish({ entry, standsIn: false })
          else if (!fleetFilling || clock.now() >= deadline) finish({ entry: undefined, standsIn: false })
          else cancel = clock.setTimer(look, FLEET_POLL_MS)
        }, () => { finish({ entry: undefined, standsIn: false }) })
      }
      cancel = clock.setTimer(look, FLEET_POLL_MS)
    })
  }

  /**
   * This request fetches `id` for everyone who asks meanwhile, here and (through a marker in
   * Redis) in the fleet; undefined if a flight is under way here (join it). A flight that ends
   * with nothing lets its waiters try again: one of them leads the next.
   */
  function lead (id: string): Flight | undefined {
    const flight = flights.lead(id)
    if (flight !== undefined) tell(id, fillMs)
    return flight
  }

  /** Keeps TI's answer as `decision` allows, here and for the fleet; undefined if it is too large. */
  function store (key: CacheKey, rule: string, decision: Extract<Decision, { store: true }>,
    answer: { statusCode: number, headers: Headers, body: Buffer }): Entry | undefined {
    if (answer.body.length > entryMaxBytes) {
      notStored(rule, 'too-large')
      return undefined
    }
    const headers: Record<string, string | string[]> = {}
    for (const [name, value] of Object.entries(answer.headers)) if (value !== undefined && name !== 'age') headers[name] = value
    const entry: Entry = {
      status: answer.statusCode,
      headers,
      body: answer.body,
      freshMs: decision.freshMs,
      staleMs: decision.staleMs,
      initialAgeMs: decision.initialAgeMs,
      vary: decision.vary,
      rule,
      display: key.display,
      uri: key.uri,
      storedAt: clock.now()
    }
    // Kept here, or (larger than this sidecar's whole cache) in the fleet's Redis only.
    if (!memory.set(key.id, entry) && shared === undefined) {
      notStored(rule, 'too-large')
      return undefined
    }
    metrics.cacheStores.inc({ rule })
    shared?.set(key.id, entry).then((reply) => {
      sharedProblem = undefined
      sharedHolds(reply)
    }, (err: unknown) => { redisFailed(err, 'a store') })
    return entry
  }

  function sharedHolds ({ heldBytes, evictedBytes }: Pick<StoreReply, 'heldBytes' | 'evictedBytes'>): void {
    if (heldBytes >= 0) metrics.cacheRedisBytes.set(heldBytes)
    if (evictedBytes > 0) metrics.cacheRedisEvictedBytes.inc(evictedBytes)
  }

  /**
   * TI answered a request of `method` to `path` with `statusCode`: a successful unsafe one
   * drops the stored answers of its target URI, and of its Location and Content-Location on
   * the same origin (RFC 9111 §4.4), here and in Redis. Here again once Redis has dropped them:
   * a lookup meanwhile may have copied one back.
   */
  function invalidate (upstream: string, method: string, path: string, statusCode: number, headers: Headers): void {
    for (const uri of invalidatedUris(upstream, method, path, statusCode, headers)) {
      metrics.cacheInvalidations.inc({ where: 'memory' }, memory.drop(uri))
      shared?.invalidate(uri).then(({ dropped, heldBytes }) => {
        metrics.cacheInvalidations.inc({ where: 'memory' }, memory.drop(uri))
        metrics.cacheInvalidations.inc({ where: 'redis' }, dropped)
        sharedHolds({ heldBytes, evictedBytes: 0 })
      }, (err: unknown) => { redisFailed(err, 'an invalidation') })
    }
  }

  function notStored (rule: string, why: NotStored): void {
    metrics.cacheNotStored.inc({ rule, reason: why })
  }

  /** Answers from `entry`: its status, TI's headers with Age and Cache-Status, and its body (none for HEAD). */
  function serve (res: ServerResponse, entry: Entry, method: string, params: StatusParams, result: CacheResult): void {
    metrics.cacheRequests.inc({ rule: entry.rule, result })
    const { ageMs, ttlMs } = standing(entry, clock.now())
    const headers = {
      ...entry.headers,
      age: String(Math.floor(ageMs / 1000)),
      'cache-status': withUpstream(cacheStatus({ ...params, ttlSeconds: Math.round(ttlMs / 1000) }), entry.headers['cache-status']),
      'content-length': String(entry.body.length)
    }
    try {
      res.writeHead(entry.status, headers)
    } catch (err) {
      res.destroy(err as Error)
      return
    }
    res.end(method === 'HEAD' ? undefined : entry.body)
  }

  return {
    find,
    awaitFleet,
    join: flights.join,
    lead,
    store,
    invalidate,
    serve,
    notStored,
    /** A request that found no usable answer and goes upstream (or is refused). */
    missed (rule: string): void { metrics.cacheRequests.inc({ rule, result: 'miss' }) },
    entryMaxBytes,
    /** Whether an answer is fresh or usable now. */
    standing: (entry: Entry) => standing(entry, clock.now()),
    status (): CachedStatus {
      const now = clock.now()
      return {
        maxBytes,
        entryMaxBytes,
        bytes: memory.bytes(),
        shared: shared === undefined ? null : { url: shared.displayUrl, up: shared.up() },
        entries: memory.entries().map((entry) => {
          const s = standing(entry, now)
          return { rule: entry.rule, path: entry.display, ageSeconds: Math.floor(s.ageMs / 1000), bytes: entrySize(entry), state: s.fresh ? 'fresh' : 'stale' }
        })
      }
    },
    start: async (): Promise<void> => { await shared?.start() },
    async close (): Promise<void> {
      flights.endAll()
      await shared?.close()
    }
  }
}

export type ReadCache = ReturnType<typeof createReadCache>
