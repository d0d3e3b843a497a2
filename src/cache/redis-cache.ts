// The fleet's copies of cached answers, in the same Redis as the budgets (one catalog fetch
// serves every sidecar), on a connection of their own. Loaded with a dynamic import() only
// when RATE_LIMIT_REDIS_URL(_FILE) is set and CACHE_REDIS_MAX_BYTES is not 0. Every failure
// here is a miss: the cache is an optimisation, and a sidecar that cannot read Redis goes to
// its own copies and the budget.
//
// The copies share Redis with the budgets, so they must never make Redis evict or refuse a
// budget's key: their bytes are bounded (CACHE_REDIS_MAX_BYTES) by a ledger kept in the same
// atomic step as every store, which evicts the cache's own entries, those nearest their end
// first, and nothing else; every key of the cache lapses (PX) when its entries do.
import type { Redis } from 'ioredis'
import { openRedis, type RedisConnectionOptions } from '../redis/connection.js'
import { decodeEntry, encodeEntry, lifetimeMs, type Entry } from './entries.js'
import { createFleetClaims } from './fleet-fetch.js'

export interface SharedCacheOptions extends RedisConnectionOptions {
  /** The credential's key prefix (redisKeyPrefix): entries are shared only by sidecars on one credential. */
  prefix: string
  now: () => number
  /** CACHE_REDIS_MAX_BYTES: the fleet's copies in Redis, at most (entries, ledger overhead counted). */
  maxBytes: number
}

/**
 * The least time a lookup or store in Redis is given: an entry may be megabytes (a budget
 * check's RATE_LIMIT_REDIS_TIMEOUT_MS is for a few bytes). A slower one is a miss.
 */
export const CACHE_REDIS_TIMEOUT_MS = 1_000

/** What an entry costs in Redis beyond its encoded bytes: its key, its ledger member and size field. */
export const LEDGER_OVERHEAD_BYTES = 200

// Shared by the scripts: Redis's clock in ms; `forget` takes an entry's bytes off the ledger.
// The ledger: a sorted set of entry ids scored by when they end (ms, Redis's clock), and a hash
// of each id's "bytes storedAt" with their sum under '#total'.
const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function forget (ledger, sizes, id)
  local held = redis.call('HGET', sizes, id)
  if held then redis.call('HINCRBY', sizes, '#total', -tonumber(string.match(held, '^%d+'))) end
  redis.call('HDEL', sizes, id)
  redis.call('ZREM', ledger, id)
end
`

// KEYS: the entry, the ledger, the sizes, the entry's URI set. ARGV: id, stored at (Redis's
// clock), lifetime ms, bytes, the bound, the entries' key prefix, the encoded entry.
// Returns {code, bytes held, bytes evicted, now}: 0 stored; 1 already past its life (a store
// that reached Redis late: it never looks younger than it is); 2 a newer answer is there.
const STORE = PRELUDE + `
local id, storedAt, size, max = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ending = storedAt + tonumber(ARGV[3])
local function total () return tonumber(redis.call('HGET', KEYS[3], '#total') or '0') end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do forget(KEYS[2], KEYS[3], gone) end
if ending <= now then return {1, total(), 0, now} end
local held = redis.call('HGET', KEYS[3], id)
if held and tonumber(string.match(held, ' (%d+)$')) > storedAt then return {2, total(), 0, now} end
forget(KEYS[2], KEYS[3], id)
local evicted = 0
while total() + size > max do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  -- Sizes counted of entries no longer listed (the ledger's keys were evicted apart): start again.
  if not oldest then redis.call('HSET', KEYS[3], '#total', 0) break end
  evicted = evicted + tonumber(string.match(redis.call('HGET', KEYS[3], oldest) or '0', '^%d+'))
  redis.call('DEL', ARGV[6] .. oldest)
  forget(KEYS[2], KEYS[3], oldest)
end
redis.call('SET', KEYS[1], ARGV[7], 'PX', ending - now)
redis.call('ZADD', KEYS[2], ending, id)
redis.call('HSET', KEYS[3], id, size .. ' ' .. storedAt)
redis.call('HINCRBY', KEYS[3], '#total', size)
redis.call('SADD', KEYS[4], id)
for i = 2, 4 do
  if redis.call('PTTL', KEYS[i]) < ending - now then redis.call('PEXPIRE', KEYS[i], ending - now) end
end
return {0, total(), evicted, now}
`

// KEYS: a URI set, the ledger, the sizes. ARGV: the entries' key prefix, the fleet's
// invalidation channel, the URI. Drops every entry of the URI (RFC 9111 §4.4), and tells every
// sidecar to drop its own copies. Returns {entries dropped, bytes held}.
const INVALIDATE = PRELUDE + `
local dropped = 0
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  dropped = dropped + redis.call('DEL', ARGV[1] .. id)
  forget(KEYS[2], KEYS[3], id)
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {dropped, tonumber(redis.call('HGET', KEYS[3], '#total') or '0')}
`

type ScriptClient = Redis & {
  sapCacheStore: (numKeys: number, ...args: Array<string | number | Buffer>) => Promise<[number, number, number, number]>
  sapCacheInvalidate: (numKeys: number, ...args: string[]) => Promise<[number, number]>
}

/** What a store did: stored, or why not; the bytes the fleet's copies hold now (-1: not asked), and those it evicted. */
export interface StoreReply {
  outcome: 'stored' | 'late' | 'newer' | 'too-large'
  heldBytes: number
  evictedBytes: number
}

const OUTCOMES = ['stored', 'late', 'newer'] as const

export function createSharedCache ({ prefix, now, maxBytes, ...options }: SharedCacheOptions) {
  const connection = { ...options, timeoutMs: Math.max(options.timeoutMs, CACHE_REDIS_TIMEOUT_MS) }
  const { client: plain, describe, displayUrl, connect } = openRedis(connection)
  // Invalidations reach the other sidecars' copies in memory on a connection of its own (one
  // in subscriber mode runs no other command). One missed while it is down is not replayed.
  const listener = openRedis(connection)
  const channel = `${prefix}cache-invalidated`
  const client = plain as ScriptClient
  client.defineCommand('sapCacheStore', { lua: STORE })
  client.defineCommand('sapCacheInvalidate', { lua: INVALIDATE })
  let lastError: unknown
  client.on('error', (err) => { lastError = err })
  const key = (id: string): string => `${prefix}cache:${id}`
  const fillKey = (id: string): string => `${prefix}cache-fill:${id}`
  const uriSetKey = (uri: string): string => `${prefix}cache-uri:${uri}`
  const ledgerKeys = [`${prefix}cache-ledger`, `${prefix}cache-sizes`]
  const ready = (): void => { if (client.status !== 'ready') throw new Error(`not connected (${client.status})`) }
  /** A pipeline's results, or its first error. */
  async function exec (pipeline: ReturnType<typeof client.pipeline>): Promise<unknown[]> {
    const replies = (await pipeline.exec()) ?? []
    for (const [err] of replies) if (err != null) throw err
    return replies.map(([, result]) => result)
  }
  // Redis's clock as last read, and when on this sidecar's (when the answer came back): Redis's
  // time at a local moment is at least redisMs + (that moment - localMs). A store is dated
  // from it: never younger than it truly is.
  let calibration: { redisMs: number, localMs: number } | undefined
  const calibrate = (redisMs: number): void => { calibration = { redisMs, localMs: now() } }
  const redisMsOf = (time: unknown): number => {
    const [seconds, micros] = time as [string, string]
    return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  }
  let malformed: (id: string, why: string) => void = () => {}
  let invalidated: (uri: string) => void = () => {}
  listener.client.on('error', () => {})
  // ioredis's own resubscription after a reconnection leaves its failure unhandled (a
  // process-wide rejection when Redis is away again); every 'ready' subscribes here instead.
  listener.client.options.autoResubscribe = false
  listener.client.on('ready', () => { listener.client.subscribe(channel).catch(() => {}) })
  listener.client.on('message', (from: string, uri: string) => { if (from === channel) invalidated(uri) })

  return {
    displayUrl,
    /** Tells `watcher` of every value in Redis that is not a complete entry of this version (each is a miss). */
    onMalformed (watcher: (id: string, why: string) => void): void { malformed = watcher },
    /** Tells `watcher` of every target URI a write through any sidecar of the fleet invalidated. */
    onInvalidated (watcher: (uri: string) => void): void { invalidated = watcher },
    /**
     * The fleet's copy under `id` (none: none), and whether a sidecar is fetching it for the
     * fleet now. With `unlessLeftMs` (this sidecar's copy has that long left), the entry is read
     * only if Redis holds a newer one: a stale copy is not downloaded again on every use.
     * Fails when Redis cannot be asked (not connected, or slower than the timeout).
     */
    async get (id: string, unlessLeftMs?: number): Promise<{ entry?: Entry, filling: boolean, unusable?: true }> {
      ready()
      if (unlessLeftMs !== undefined) {
        const [left, fill] = await exec(client.pipeline().pttl(key(id)).pttl(fillKey(id)))
        // The same entry has the same time left (1 s for the clocks' reading moments).
        if (!(Number(left) > unlessLeftMs + 1_000)) return { filling: Number(fill) > 0 }
      }
      // One round trip (a pipeline: no MULTI needed): the value, Redis's clock (its age), and
      // how long the fleet's fetch of it may still take.
      const [value, time, fill] = await exec(client.pipeline().getBuffer(key(id)).time().pttl(fillKey(id)))
      const filling = Number(fill) > 0
      calibrate(redisMsOf(time))
      if (value == null) return { filling }
      const entry = decodeEntry(value as Buffer, redisMsOf(time), now())
      if (typeof entry !== 'string') return { entry, filling }
      malformed(id, entry)
      return { filling, unusable: true }
    },
    /** The fleet's one fetch per key (src/cache/fleet-fetch.ts): its claims share this connection. */
    claims: createFleetClaims({ client, entryKey: key, claimKey: fillKey, ready }),
    /**
     * Stores `entry` for the fleet, for the rest of its whole life (fresh and stale) as Redis
     * sees it when the store reaches it, within CACHE_REDIS_MAX_BYTES.
     */
    async set (id: string, entry: Entry): Promise<StoreReply> {
      ready()
      if (calibration === undefined) calibrate(redisMsOf(await client.time()))
      const { redisMs, localMs } = calibration!
      const storedAtMs = Math.floor(redisMs - (localMs - entry.storedAt))
      const encoded = encodeEntry(entry, storedAtMs)
      const bytes = encoded.length + LEDGER_OVERHEAD_BYTES
      if (bytes > maxBytes) return { outcome: 'too-large', heldBytes: -1, evictedBytes: 0 }
      const reply = await client.sapCacheStore(4, key(id), ...ledgerKeys, uriSetKey(entry.uri),
        id, storedAtMs, Math.round(lifetimeMs(entry)), bytes, maxBytes, key(''), encoded)
      calibrate(Number(reply[3]))
      return { outcome: OUTCOMES[reply[0]] as StoreReply['outcome'], heldBytes: Number(reply[1]), evictedBytes: Number(reply[2]) }
    },
    /** Drops the fleet's copies of the target URI `uri` (a write changed it): how many, and the bytes held after. */
    async invalidate (uri: string): Promise<{ dropped: number, heldBytes: number }> {
      ready()
      const [dropped, heldBytes] = await client.sapCacheInvalidate(3, uriSetKey(uri), ...ledgerKeys, key(''), channel, uri)
      return { dropped: Number(dropped), heldBytes: Number(heldBytes) }
    },
    up: (): boolean => client.status === 'ready',
    describe,
    lastError: (): unknown => lastError,
    /** Connects, for at most the command timeout (at least 1 s); until it is up, every lookup is a miss. Never fails. */
    async start (): Promise<void> { await Promise.all([connect(), listener.connect()]) },
    async close (): Promise<void> {
      client.disconnect()
      listener.client.disconnect()
    }
  }
}

export type SharedCache = ReturnType<typeof createSharedCache>
