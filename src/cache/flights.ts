// One fetch per key in this sidecar: the first request that misses leads a flight, the others
// wait for its outcome, like the token's single-flight. A waiter that leaves stops waiting; the
// flight goes on for the others. While a leader reads TI's answer whole it holds memory: the
// flights together hold at most a budget of bytes, so a burst of misses on many keys cannot
// take more than the cache itself may.
import type { Entry } from './entries.js'

/**
 * How a fetch failed, for everyone who waited for it: TI's own answer, held
 * whole, or the sidecar's error (a timeout, a cut, a refused budget or token), so a failed fetch
 * answers all its waiters at once instead of one fetch each.
 */
export type Failure =
  | { readonly answer: { readonly statusCode: number, readonly headers: Record<string, string | string[] | undefined>, readonly body: Buffer } }
  | { readonly error: Error, readonly retryAfterSeconds?: number, /** This sidecar's own state caused it (its budget cannot be checked): not the fleet's answer. */ readonly own?: true }

/** What a flight ended with: the stored answer, or one standing in for TI's failure, or none. */
export interface FlightResult {
  readonly entry: Entry | undefined
  /** The entry is a stale one standing in for TI's failure, not a new answer. */
  readonly standsIn: boolean
  /**
   * The fetch failed: with no entry, what its waiters are answered (none: they try again); with
   * one standing in, what the fleet's waiters without a copy of their own are answered.
   */
  readonly failure?: Failure
}

/** What a waiter gets: the flight's result, or that its caller left. */
export type FlightOutcome = FlightResult | 'gone'

export interface Flight {
  /** Ends the flight (once; later calls do nothing) and releases what it held. */
  settle: (entry: Entry | undefined, standsIn?: boolean, failure?: Failure) => void
  /** Ends the flight with its failure: every waiter is answered with it (once, like settle). */
  fail: (failure: Failure) => void
  /** Reserves `bytes` to hold TI's answer while it arrives; false when the flights' budget is spent. */
  reserve: (bytes: number) => boolean
  /** How many requests wait for it now. */
  waiting: () => number
}

/** The caller's side of an exchange: it emits 'close' when the caller leaves. */
interface Caller {
  once: (event: 'close', listener: () => void) => unknown
  removeListener: (event: 'close', listener: () => void) => unknown
}

const NOTHING: FlightResult = Object.freeze({ entry: undefined, standsIn: false })

export function createFlights ({ holdBudgetBytes, onEnd }: { holdBudgetBytes: number, onEnd: (id: string, result: FlightResult) => void }) {
  const flights = new Map<string, Set<(result: FlightResult) => void>>()
  let held = 0

  return {
    /** Waits for the flight of `id` (undefined: there is none now). */
    join (id: string, caller: Caller): Promise<FlightOutcome> | undefined {
      const waiting = flights.get(id)
      if (waiting === undefined) return undefined
      return new Promise((resolve) => {
        const left = (): void => {
          waiting.delete(done)
          resolve('gone')
        }
        const done = (result: FlightResult): void => {
          caller.removeListener('close', left)
          resolve(result)
        }
        waiting.add(done)
        caller.once('close', left)
      })
    },

    /** Starts the flight of `id`; undefined if one is under way (join it instead). `ended` runs as it ends. */
    lead (id: string, ended?: () => void): Flight | undefined {
      if (flights.has(id)) return undefined
      const waiting = new Set<(result: FlightResult) => void>()
      flights.set(id, waiting)
      let reserved = 0
      let over = false
      const end = (result: FlightResult): void => {
        if (over) return
        over = true
        held -= reserved
        reserved = 0
        // Not a later flight of the same key (one led after endAll).
        if (flights.get(id) === waiting) flights.delete(id)
        onEnd(id, result)
        ended?.()
        for (const done of waiting) done(result)
      }
      return {
        settle (entry, standsIn = false, failure) {
          end(entry === undefined ? NOTHING : failure === undefined ? { entry, standsIn } : { entry, standsIn, failure })
        },
        fail (failure) { end({ entry: undefined, standsIn: false, failure }) },
        reserve (bytes) {
          if (over || held + bytes > holdBudgetBytes) return false
          held += bytes
          reserved += bytes
          return true
        },
        waiting: () => waiting.size
      }
    },

    /** Ends every flight with nothing (shutting down): their waiters go on by themselves. */
    endAll (): void {
      for (const waiting of flights.values()) for (const done of waiting) done(NOTHING)
      flights.clear()
    }
  }
}
