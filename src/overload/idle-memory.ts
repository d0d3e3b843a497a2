// Memory handed back while the sidecar is idle, as most sidecars are most of the time. V8 keeps
// the young generation at the size the last burst grew it to (two semi-spaces of up to
// --max-semi-space-size) and old space as fragmented as the burst left it, until allocation
// triggers a collection, which an idle process never does. One memory-reducing collection (V8's
// "last resort": mark-compacts, repeated while they free, and the young generation shrunk) after
// start-up and after each burst returns it: 32.7 → 22.5 MiB of private memory at start
// (bench/RESULTS.md). It stops the world for as long as the live heap takes to mark and move,
// while what it returns does not grow with it: only a small heap with nothing in flight is worth it.
import { getHeapStatistics } from 'node:v8'
import { performance, type EventLoopUtilization } from 'node:perf_hooks'
import type { Clock } from '../clock.js'
import { exposedGc } from './memory-watch.js'

/** How often idleness is checked: a collection comes one whole quiet check after a burst. */
export const IDLE_CHECK_MS = 10_000
/**
 * The first check, after start-up: soon, so that start-up's garbage goes before the first
 * traffic usually arrives (a readiness probe, then endpoints updated), yet after /readyz has
 * answered, so that readiness never waits for a collection (40 ms at start on a busy machine).
 */
export const FIRST_CHECK_MS = 500
/** Quiet: the event loop busy less than this share of a whole check (a scrape or a probe costs far less). */
export const IDLE_UTILIZATION = 0.02
/** V8's committed heap must have grown this much since the last collection for another to pay. */
export const REGROWN_BYTES = 2 * 2 ** 20
/**
 * Above this much of V8's heap in use (garbage included: 20–29 MiB at start-up), no collection:
 * a full read cache (45–53 MiB live) made one a 0.1–1 s pause for 1–2 MiB returned (an outside
 * review, load ~18).
 */
export const USED_MAX_BYTES = 40 * 2 ** 20

export interface IdleMemoryOptions {
  clock: Clock
  /** A memory-reducing full collection (reducingCollection by default). */
  collect?: () => void
  /** V8's committed heap in bytes (total_heap_size by default). */
  heapBytes?: () => number
  /** V8's heap in use in bytes (used_heap_size by default). */
  usedBytes?: () => number
  /** Requests in flight: none may wait for a collection it could be spared (none by default). */
  inFlight?: () => number
  /** The event loop's busy share since the last call (perf_hooks' eventLoopUtilization by default). */
  utilization?: () => number
  /** Called after each collection with V8's committed heap before and after it (a counter, a debug line). */
  collected?: (heapBytes: { before: number, after: number }) => void
}

export interface IdleMemory {
  /** Collects soon after (start-up's garbage), then after each burst once the sidecar is quiet. */
  start: () => void
  /** For good: a start after it does nothing. */
  stop: () => void
}

/** V8's memory-reducing collection: a full one that also compacts and shrinks the young generation. */
export function reducingCollection (): () => void {
  const gc = exposedGc()
  return () => { gc({ type: 'major', execution: 'sync', flavor: 'last-resort' }) }
}

export function returnMemoryWhenIdle (options: IdleMemoryOptions): IdleMemory {
  const { clock } = options
  const collect = options.collect ?? reducingCollection()
  const heapBytes = options.heapBytes ?? (() => getHeapStatistics().total_heap_size)
  const usedBytes = options.usedBytes ?? (() => getHeapStatistics().used_heap_size)
  const inFlight = options.inFlight ?? (() => 0)
  const utilization = options.utilization ?? loopUtilization()
  /** The committed heap after the last collection (none yet: any heap is worth one). */
  let collectedAt = 0
  let cancel: (() => void) | undefined
  let stopped = false

  const check = (): void => {
    // Read every check, so that each covers exactly the interval since the last.
    const busy = utilization()
    const before = heapBytes()
    if (busy < IDLE_UTILIZATION && before - collectedAt >= REGROWN_BYTES && usedBytes() <= USED_MAX_BYTES && inFlight() === 0) {
      collect()
      collectedAt = heapBytes()
      options.collected?.({ before, after: collectedAt })
    }
    cancel = clock.setTimer(check, IDLE_CHECK_MS)
  }
  return {
    start () {
      if (cancel !== undefined || stopped) return
      utilization()
      cancel = clock.setTimer(check, FIRST_CHECK_MS)
    },
    stop () {
      stopped = true
      cancel?.()
      cancel = undefined
    }
  }
}

/** The event loop's busy share since the last call (1 at the first: nothing to compare with). */
export function loopUtilization (): () => number {
  let last: EventLoopUtilization | undefined
  return () => {
    const now = performance.eventLoopUtilization()
    const share = last === undefined ? 1 : performance.eventLoopUtilization(now, last).utilization
    last = now
    return share
  }
}
