// The read cache's dealings with the fleet's copies in Redis (redis-cache.ts): one read of a key
// for every lookup that wants it meanwhile, a failure warned once per kind, and a value of
// another layout logged once per key.
import type { Logger } from 'pino'
import type { Metrics } from '../metrics.js'
import type { SharedCache } from './redis-cache.js'

/** How many keys whose value in Redis was not an entry are remembered, so that each is logged once. */
export const MALFORMED_LOGGED_MAX = 1_000

type Read = ReturnType<SharedCache['get']>

export class SharedReads {
  readonly #shared: SharedCache
  readonly #log: Logger
  readonly #metrics: Pick<Metrics, 'cacheRedisErrors' | 'cacheRedisMalformed'>
  readonly #reading = new Map<string, Read>()
  readonly #malformedLogged = new Set<string>()
  /** The last failure warned of; cleared when Redis answers again. */
  #problem: string | undefined

  constructor (shared: SharedCache, log: Logger, metrics: Pick<Metrics, 'cacheRedisErrors' | 'cacheRedisMalformed'>) {
    this.#shared = shared
    this.#log = log
    this.#metrics = metrics
    shared.onMalformed((id, why) => { this.#malformed(id, why) })
  }

  /**
   * One read of `id` from Redis for every lookup that wants it meanwhile: a burst of callers on
   * a sidecar that holds no copy reads a megabyte entry once, not once each (which would keep
   * Redis busy past the budget checks' timeout, and every caller would be refused).
   */
  read (id: string, ownLeftMs: number | undefined): Read {
    const k = ownLeftMs === undefined ? id : `${id} newer`
    let read = this.#reading.get(k)
    if (read === undefined) {
      read = this.#shared.get(id, ownLeftMs).finally(() => { this.#reading.delete(k) })
      this.#reading.set(k, read)
    }
    return read
  }

  /** Redis answered: its next failure is warned of again. */
  answered (): void {
    this.#problem = undefined
  }

  /** `what` failed in Redis: counted, and warned of once per kind of failure (a Redis that is down fails every lookup). */
  failed (err: unknown, what: string): void {
    this.#metrics.cacheRedisErrors.inc()
    const problem = this.#shared.describe(err)
    if (problem !== this.#problem) this.#log.warn({ reason: problem }, `read cache: ${what} in redis failed; using this sidecar's copies`)
    this.#problem = problem
  }

  // A value of another layout (a rolling update) is a miss for every request of its key until
  // a fetch replaces it: counted each time, logged once per key.
  #malformed (id: string, why: string): void {
    this.#metrics.cacheRedisMalformed.inc()
    if (this.#malformedLogged.has(id)) return
    if (this.#malformedLogged.size >= MALFORMED_LOGGED_MAX) this.#malformedLogged.clear()
    this.#malformedLogged.add(id)
    this.#log.warn({ key: id, reason: why }, 'read cache: a value in redis is not an entry of this version; taken as a miss')
  }
}
