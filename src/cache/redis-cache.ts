// The fleet's copies of cached answers, in the same Redis as the budgets (one catalog fetch
// serves every sidecar), on a connection of their own. Loaded with a dynamic import() only
// when RATE_LIMIT_REDIS_URL(_FILE) is set. Every failure here is a miss: the cache is an
// optimisation, and a sidecar that cannot read Redis goes to its own copies and the budget.
import { openRedis, type RedisConnectionOptions } from '../redis/connection.js'
import { decodeEntry, encodeEntry, lifetimeMs, type Entry } from './entries.js'
import { createFleetClaims } from './fleet-fetch.js'

export interface SharedCacheOptions extends RedisConnectionOptions {
  /** The credential's key prefix (redisKeyPrefix): entries are shared only by sidecars on one credential. */
  prefix: string
  now: () => number
}

/**
 * The least time a lookup or store in Redis is given: an entry may be megabytes (a budget
 * check's RATE_LIMIT_REDIS_TIMEOUT_MS is for a few bytes). A slower one is a miss.
 */
export const CACHE_REDIS_TIMEOUT_MS = 1_000

export function createSharedCache ({ prefix, now, ...options }: SharedCacheOptions) {
  const connection = { ...options, timeoutMs: Math.max(options.timeoutMs, CACHE_REDIS_TIMEOUT_MS) }
  const { client, describe, displayUrl, connect } = openRedis(connection)
  let lastError: unknown
  client.on('error', (err) => { lastError = err })
  const key = (id: string): string => `${prefix}cache:${id}`
  const fillKey = (id: string): string => `${prefix}cache-fill:${id}`
  const ready = (): void => { if (client.status !== 'ready') throw new Error(`not connected (${client.status})`) }
  /** A pipeline's results, or its first error. */
  async function exec (pipeline: ReturnType<typeof client.pipeline>): Promise<unknown[]> {
    const replies = (await pipeline.exec()) ?? []
    for (const [err] of replies) if (err != null) throw err
    return replies.map(([, result]) => result)
  }

  return {
    displayUrl,
    /**
     * The fleet's copy under `id` (none: none), and whether a sidecar is fetching it for the
     * fleet now. With `unlessLeftMs` (this sidecar's copy has that long left), the entry is read
     * only if Redis holds a newer one: a stale copy is not downloaded again on every use.
     * Fails when Redis cannot be asked (not connected, or slower than the timeout).
     */
    async get (id: string, unlessLeftMs?: number): Promise<{ entry?: Entry, filling: boolean }> {
      ready()
      if (unlessLeftMs !== undefined) {
        const [left, fill] = await exec(client.pipeline().pttl(key(id)).pttl(fillKey(id)))
        // The same entry has the same time left (1 s for the clocks' reading moments).
        if (!(Number(left) > unlessLeftMs + 1_000)) return { filling: Number(fill) > 0 }
      }
      // One round trip (a pipeline: no MULTI needed): the value, how long its key has left (its
      // age, on Redis's clock), and how long the fleet's fetch of it may still take.
      const [value, left, fill] = await exec(client.pipeline().getBuffer(key(id)).pttl(key(id)).pttl(fillKey(id)))
      const filling = Number(fill) > 0
      const entry = value == null || !(Number(left) > 0) ? undefined : decodeEntry(value as Buffer, Number(left), now())
      return entry === undefined ? { filling } : { entry, filling }
    },
    /** The fleet's one fetch per key (src/cache/fleet-fetch.ts): its claims share this connection. */
    claims: createFleetClaims({ client, entryKey: key, claimKey: fillKey, ready }),
    /** Stores `entry` for the fleet, for its whole life (fresh and stale). */
    async set (id: string, entry: Entry): Promise<void> {
      ready()
      await client.set(key(id), encodeEntry(entry), 'PX', Math.max(1, Math.round(lifetimeMs(entry))))
    },
    up: (): boolean => client.status === 'ready',
    describe,
    lastError: (): unknown => lastError,
    /** Connects, for at most the command timeout (at least 1 s); until it is up, every lookup is a miss. Never fails. */
    async start (): Promise<void> { await connect() },
    async close (): Promise<void> {
      client.disconnect()
    }
  }
}

export type SharedCache = ReturnType<typeof createSharedCache>
