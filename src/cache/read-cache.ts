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
import { createMemoryStore, entrySize, lifetimeMs, standing, type Entry, type MemoryStore } from './entries.js'
import { createFlights, type Flight } from './flights.js'
import { createFleetFetch, type Turn } from './fleet-fetch.js'
import { invalidatedUris, varyMatches, type CacheKey, type Decision, type NotStored, type StatusParams } from './policy.js'
import type { SharedCache, StoreReply } from './redis-cache.js'
import { SharedReads } from './shared-reads.js'
import { entryOf, sendEntry } from './stored-answer.js'

type Headers = Record<string, string | string[] | undefined>

/** How a request was answered from the cache (the metric's `result` label). */
export type CacheResult = 'hit' | 'coalesced' | 'stale' | 'miss'

export interface ReadCacheOptions {
  clock: Clock
  log: Logger
  metrics: Metrics
  /** This sidecar's copies, at most: CACHE_MAX_BYTES, or less where the memory limit bounds it (memory-bound.ts). */
  maxBytes: number
  /** CACHE_MAX_BYTES, for /status. */
  configuredMaxBytes?: number
  /** CACHE_ENTRY_MAX_BYTES: a larger answer streams through and is not stored. */
  entryMaxBytes: number
  /** The fleet's copies in Redis (RATE_LIMIT_REDIS_URL set). */
  shared?: SharedCache
  /** The longest a fetch may take (budget wait, queue, TI's answer): how long the fleet waits for one. */
  fillMs: number
}

/** What a lookup found: a usable stored answer, if any. */
export interface Lookup {
  entry: Entry | undefined
  /** Nothing usable here, but Redis holds a value under the key (another layout, or TI's Vary gives it another caller). */
  unusable?: boolean
}

/** A request that asks the fleet first fetches by itself without Redis. */
const FETCH: Turn = Object.freeze({ kind: 'fetch' })

export type { Flight, FlightOutcome } from './flights.js'
export type { Turn } from './fleet-fetch.js'
export { MALFORMED_LOGGED_MAX } from './shared-reads.js'
export { PURGE_MS } from './entries.js'

export interface CachedStatus {
  /** The bound in force: CACHE_MAX_BYTES, or less where the memory limit bounds it. */
  maxBytes: number
  configuredMaxBytes: number
  entryMaxBytes: number
  bytes: number
  shared: { url: string, up: boolean } | null
  /** How many copies this sidecar holds; `entries` lists the most recently used of them. */
  count: number
  entries: Array<{ rule: string, path: string, ageSeconds: number, bytes: number, state: 'fresh' | 'stale' }>
}

/** Copies listed on /status: a full cache of small answers holds tens of thousands. */
export const STATUS_ENTRIES = 100

/** What /status shows of the cache at `now`: its bounds, Redis, and the entries used last. */
function statusOf (memory: MemoryStore, { maxBytes, configuredMaxBytes = maxBytes, entryMaxBytes, shared }: Pick<ReadCacheOptions, 'maxBytes' | 'configuredMaxBytes' | 'entryMaxBytes' | 'shared'>, now: number): CachedStatus {
  return {
    maxBytes,
    configuredMaxBytes,
    entryMaxBytes,
    bytes: memory.bytes(),
    shared: shared === undefined ? null : { url: shared.displayUrl, up: shared.up() },
    count: memory.count(),
    entries: memory.entries(STATUS_ENTRIES).map((entry) => {
      const s = standing(entry, now)
      return { rule: entry.rule, path: entry.display, ageSeconds: Math.floor(s.ageMs / 1000), bytes: entrySize(entry), state: s.fresh ? 'fresh' : 'stale' }
    })
  }
}

export function createReadCache ({ clock, log, metrics, maxBytes, configuredMaxBytes, entryMaxBytes, shared, fillMs }: ReadCacheOptions) {
  const memory = createMemoryStore({ clock, maxBytes, onEvict: (entry) => { metrics.cacheEvictions.inc({ rule: entry.rule }) } })
  metrics.measureCache(() => memory.bytes())
  const reads = shared === undefined ? undefined : new SharedReads(shared, log, metrics)
  const redisFailed = (err: unknown, what: string): void => { reads?.failed(err, what) }
  // One fetch per key for the fleet (fleet-fetch.ts); a flight that ends gives up its claim.
  const fleet = shared === undefined ? undefined : createFleetFetch({ claims: shared.claims, clock, fillMs, find, failed: redisFailed })
  const flights = createFlights({ holdBudgetBytes: maxBytes, onEnd: (id, result) => { fleet?.ended(id, result) } })

  // Another sidecar's write: its copies here go too.
  shared?.onInvalidated((uri) => { metrics.cacheInvalidations.inc({ where: 'memory' }, memory.drop(uri)) })

  /** The stored answer for a request, fresh or stale (none: none usable). Never fails. */
  async function find (key: CacheKey, headers: Headers): Promise<Lookup> {
    const local = memory.get(key.id)
    const own = local !== undefined && varyMatches(local.vary, headers) ? local : undefined
    if (reads === undefined || (own !== undefined && standing(own, clock.now()).fresh)) return { entry: own }
    let theirs: Entry | undefined
    let unusable = false
    try {
      // A stale copy of our own: the entry is read only if Redis holds a newer one.
      const ownLeftMs = own === undefined ? undefined : lifetimeMs(own) - (clock.now() - own.storedAt)
      const read = await reads.read(key.id, ownLeftMs)
      theirs = read.entry
      unusable = read.unusable === true || theirs !== undefined
      reads.answered()
    } catch (err) {
      redisFailed(err, 'a lookup')
      return { entry: own }
    }
    if (theirs === undefined || !varyMatches(theirs.vary, headers) || !standing(theirs, clock.now()).usable ||
      (own !== undefined && own.storedAt >= theirs.storedAt)) return own === undefined && unusable ? { entry: own, unusable } : { entry: own }
    // Another sidecar's newer copy: kept here too, so the next hits need no Redis.
    memory.set(key.id, theirs)
    return { entry: theirs }
  }

  /**
   * Before this sidecar fetches `key` (refreshing `found`), the fleet is asked: this request
   * fetches for it, or gets another sidecar's fetch's entry or failure (fleet-fetch.ts).
   */
  async function turn (key: CacheKey, headers: Headers, found: Entry | undefined, caller: Caller, unusable = false): Promise<Turn> {
    return await fleet?.turn(key, headers, found, caller, unusable) ?? FETCH
  }

  /** Keeps TI's answer as `decision` allows, here and for the fleet; undefined if it is too large. */
  function store (key: CacheKey, rule: string, decision: Extract<Decision, { store: true }>,
    answer: { statusCode: number, headers: Headers, body: Buffer }): Entry | undefined {
    if (answer.body.length > entryMaxBytes) {
      notStored(rule, 'too-large')
      return undefined
    }
    const entry = entryOf(key, rule, decision, answer, clock.now())
    // Kept here, or (larger than this sidecar's whole cache) in the fleet's Redis only.
    if (!memory.set(key.id, entry) && shared === undefined) {
      notStored(rule, 'too-large')
      return undefined
    }
    metrics.cacheStores.inc({ rule })
    shared?.set(key.id, entry).then((reply) => {
      reads?.answered()
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
   * the same origin (RFC 9111 §4.4), here, in Redis and (told through Redis) on every sidecar.
   * Here again once Redis has dropped them: a lookup meanwhile may have copied one back.
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

  /**
   * Answers from `entry` (stored-answer.ts sendEntry). `result`, what the caller is counted as,
   * is for tracing's span event: `counted` counts it where it is decided.
   */
  function serve (res: ServerResponse, entry: Entry, method: string, params: StatusParams, result: CacheResult): void {
    sendEntry(res, entry, method, params, clock.now())
  }

  return {
    find,
    turn,
    join: flights.join,
    /** This request fetches `id` for every request here that asks meanwhile (`ended` runs as it ends); undefined if one does already (join it). */
    lead: (id: string, ended: () => void): Flight | undefined => flights.lead(id, ended),
    store,
    invalidate,
    serve,
    notStored,
    /** One request's cache result, under this sidecar's rule for it (an entry may be another's): a hit, a waiter's answer, or a fetch it led (fill.ts). */
    counted: (rule: string, result: CacheResult): void => { metrics.cacheRequests.inc({ rule, result }) },
    entryMaxBytes,
    /** Whether an answer is fresh or usable now. */
    standing: (entry: Entry) => standing(entry, clock.now()),
    status: (): CachedStatus => statusOf(memory, { maxBytes, configuredMaxBytes, entryMaxBytes, shared }, clock.now()),
    /**
     * Memory is short (the overload manager asks before it sheds): gives back about `bytes`,
     * the copies past their lifetime first, then the least recently used; the fleet's copies in
     * Redis stay, and a miss fetches again. The bytes the dropped copies were counted for.
     */
    giveWay: (bytes: number): number => memory.giveWay(bytes),
    async start (): Promise<void> {
      memory.startPurging()
      await shared?.start()
    },
    async close (): Promise<void> {
      memory.stopPurging()
      flights.endAll()
      fleet?.close()
      await shared?.close()
    }
  }
}

export type ReadCache = ReturnType<typeof createReadCache>
