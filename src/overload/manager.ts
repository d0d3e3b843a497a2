// The overload manager: sheds new requests with 503 OVERLOADED before the process outgrows
// its memory limit, or when too many requests are in flight, answers new connections the same
// way beyond a bound on open ones, and stops by itself when the pressure is gone. Envoy's
// overload manager is the model: know the limit, act before it, say so (logs, metrics,
// /readyz's reason, /status).
import type { Metrics } from '../metrics.js'
import { MemoryWatch, type Load, type MemoryStatus, type MemoryWatchOptions } from './memory-watch.js'
import type { HeadsStatus, WaitingConnections } from './waiting-connections.js'
import { BODY_COST, CONNECTION_WATER, COUNTED_BODY_MAX_BYTES, headsBound, KEPT_HEADS, PRIVATE_CLEAR, PRIVATE_HOLD_MS, REQUEST_COST } from './waters.js'

export {
  ADMISSION_SAMPLE_MS, BODY_COST, COLLECT_GAP_MS, COLLECT_SHARE, CONNECTION_WATER, COUNTED_BODY_MAX_BYTES, DISCARD_COLLECT_BYTES, HEADS_WATER, headsBound, HIGH_WATER, KEPT_HEADS, LOW_WATER, PRIVATE_CLEAR,
  PRIVATE_FLOOR_IN_FLIGHT, PRIVATE_HOLD_MS, PRIVATE_WATER, REQUEST_COST, SAMPLE_MS, shouldShed, USAGE_WATER
} from './waters.js'
export { collectGap, fullCollection, liveBytes, youngCollection } from './memory-watch.js'

/** Retry-After of a 503 OVERLOADED. */
export const OVERLOAD_RETRY_AFTER_S = 1
/** How long an excess connection, once answered, is still read before it is closed: a lingering close (RFC 9112 §9.6), so no reset destroys the answer. */
export const EXCESS_LINGER_MS = 2_000
/** Node's own listen backlog, kept when connections are not bounded. */
export const DEFAULT_BACKLOG = 511
/**
 * The admin listener's accept queue: Linux's default net.core.somaxconn since 5.4 (the kernel
 * caps it there). A flood that fills Node's 511 makes the kernel drop new SYNs, a probe's among
 * them, and a dropped SYN is sent again only after 1 s (docs/overload.md).
 */
export const ADMIN_BACKLOG = 4096

/**
 * The proxy listener's accept queue holds as many connections as MAX_CONNECTIONS admits (the
 * kernel caps it at net.core.somaxconn): a burst is answered from the queue, the excess 503
 * OVERLOADED, rather than left on SYN retries (docs/overload.md#why-these-numbers).
 */
export function proxyBacklog (maxConnections: number): number {
  return Math.max(DEFAULT_BACKLOG, maxConnections)
}

export type ShedReason = 'memory' | 'in_flight' | 'connections'

export interface OverloadStatus extends MemoryStatus {
  state: 'normal' | 'shedding'
  inFlight: number
  /** What the bodies of the requests in flight are counted for (BODY_COST times their announced length), on top of live memory and usage. */
  inFlightBodyBytes: number
  /** 0: no cap. */
  maxInFlight: number
  /** Connections open on the proxy listener (the answered excess not counted). */
  connections: number
  /** 0: no bound. */
  maxConnections: number
  /** The proxy listener's unfinished heads, once closeWaitingOnMemory follows them. */
  heads?: HeadsStatus
}

export interface OverloadOptions extends MemoryWatchOptions {
  /** MAX_IN_FLIGHT_REQUESTS; 0 for no cap. */
  maxInFlight: number
  /** MAX_CONNECTIONS; 0 for no bound. */
  maxConnections?: number
  metrics: Pick<Metrics, 'overloadShedding' | 'overloadShed' | 'memoryLimitBytes' | 'measureLiveMemory' | 'measurePrivateMemory'>
}

export interface OverloadManager {
  /**
   * Why a new request must be shed, or undefined: it is admitted and counted in flight, with
   * BODY_COST times the body length its head announces (up to COUNTED_BODY_MAX_BYTES) and what
   * its header fields cost (admission.ts headerCost), until leave().
   */
  admit: (bodyBytes?: number, headerBytes?: number) => ShedReason | undefined
  /** An admitted request's answer closed (call once per admission, with the same lengths). */
  leave: (bodyBytes?: number, headerBytes?: number) => void
  /** Bytes of a shed request's body were read and dropped: every DISCARD_COLLECT_BYTES, a young collection. */
  discarded: (bytes: number) => void
  /** Whether a new connection must be answered 503 and closed ('connections'), or undefined: it is counted open until disconnect(). */
  connect: () => ShedReason | undefined
  /** An admitted connection closed (call once per admission). */
  disconnect: () => void
  /**
   * Bounds `waiting`'s unfinished heads at headsBound (of the limit, at `connectionCost` each):
   * one beyond closes the oldest, counted as `heads`, a warn when closing begins after
   * PRIVATE_HOLD_MS without. And from then on, while a timed sample finds private memory with the costs in flight over
   * CONNECTION_WATER, closes `waiting` connections with an unfinished head, oldest head first:
   * as many as, at `connectionCost` each, would bring the sum PRIVATE_CLEAR of the limit under
   * it, at each such sample, the youngest `keptHeads` (KEPT_HEADS) never. Answered 503 OVERLOADED, counted as
   * `memory_connections`, the shedding gauge 1; one warn when it starts, one info when a sample
   * finds the sum PRIVATE_CLEAR under the water or none was closed for PRIVATE_HOLD_MS.
   */
  closeWaitingOnMemory: (waiting: WaitingConnections, connectionCost: number, keptHeads?: number) => void
  /** Starts sampling (the first sample at once); stop() ends it. */
  start: () => void
  stop: () => void
  status: () => OverloadStatus
  /** What /readyz adds to its reason while shedding; undefined otherwise. */
  readinessNote: () => string | undefined
}

const counted = (bodyBytes: number): number => BODY_COST * Math.min(bodyBytes, COUNTED_BODY_MAX_BYTES)

/** WaitingConnections' bound on unfinished heads, derived from the limit: counted and logged. */
function boundWaitingHeads (waiting: WaitingConnections, connectionCost: number, { limit, log, clock, metrics }: OverloadOptions): void {
  const maxHeads = headsBound(limit.bytes, connectionCost)
  if (maxHeads === 0) return
  const counter = metrics.overloadShed.labels('heads')
  let lastClosedAt = -Infinity
  waiting.boundHeads(maxHeads, (heads) => {
    counter.inc(heads)
    if (clock.now() - lastClosedAt >= PRIVATE_HOLD_MS) log.warn({ maxHeads, closedHeads: heads }, 'overloaded: at the bound of unfinished request heads, closing the oldest (503 OVERLOADED)')
    lastClosedAt = clock.now()
  })
}

export function createOverloadManager (options: OverloadOptions): OverloadManager {
  const { maxInFlight, maxConnections = 0, metrics } = options
  const load: Load = { inFlight: 0, reserved: 0 }
  const memory = new MemoryWatch(options, load)
  let connections = 0
  const shed = {
    memory: metrics.overloadShed.labels('memory'),
    in_flight: metrics.overloadShed.labels('in_flight'),
    connections: metrics.overloadShed.labels('connections')
  }
  const atInFlightCap = (): boolean => maxInFlight > 0 && load.inFlight >= maxInFlight
  const atConnectionBound = (): boolean => maxConnections > 0 && connections >= maxConnections
  /** Unfinished heads closed in the episode under way on private memory, and when the last was; undefined when none is under way. */
  let closing: { heads: number, at: number } | undefined
  let followed: WaitingConnections | undefined

  return {
    admit (bodyBytes = 0, headerBytes = 0) {
      memory.refresh()
      const cost = counted(bodyBytes) + headerBytes
      // Asked only when the waters do not shed already: a request shed on them is not shed on private memory.
      const privateFull = !memory.shedding && !memory.fitsPrivate(REQUEST_COST + cost)
      if (privateFull) memory.shedOnPrivate()
      const reason: ShedReason | undefined = memory.shedding || privateFull ? 'memory' : atInFlightCap() ? 'in_flight' : undefined
      if (reason === undefined) {
        load.inFlight += 1
        load.reserved += cost
      } else {
        shed[reason].inc()
      }
      return reason
    },
    leave (bodyBytes = 0, headerBytes = 0) {
      load.inFlight -= 1
      load.reserved -= counted(bodyBytes) + headerBytes
    },
    discarded: (bytes) => { memory.discarded(bytes) },
    connect () {
      if (atConnectionBound()) {
        shed.connections.inc()
        return 'connections'
      }
      connections += 1
      return undefined
    },
    disconnect () { connections -= 1 },
    closeWaitingOnMemory (waiting, connectionCost, keptHeads = KEPT_HEADS) {
      followed = waiting
      boundWaitingHeads(waiting, connectionCost, options)
      const clear = PRIVATE_CLEAR * options.limit.bytes
      const counter = metrics.overloadShed.labels('memory_connections')
      memory.afterSample(() => {
        const over = memory.privateOver(CONNECTION_WATER)
        if (over === undefined || (closing === undefined && over <= 0)) return
        const now = options.clock.now()
        const fields = { privateBytes: memory.status().privateBytes, limitBytes: options.limit.bytes }
        // Over like the private water's shedding: until a sample finds the sum lower, or nothing was closed for a while (malloc may keep it high).
        if (closing !== undefined && (over <= -clear || now - closing.at >= PRIVATE_HOLD_MS)) {
          options.log.info({ ...fields, closedHeads: closing.heads }, 'private memory no longer near the limit: no longer closing unfinished heads')
          closing = undefined
          memory.showClosingHeads(false)
          // The closed connections' objects are garbage in V8's heap: freed now, not kept until the next flood.
          memory.askCollection()
          return
        }
        if (over <= 0) return
        const heads = waiting.shedHeads(Math.ceil((over + clear) / connectionCost), keptHeads)
        if (heads === 0) return
        if (closing === undefined) {
          closing = { heads: 0, at: now }
          memory.showClosingHeads(true)
          options.log.warn({ ...fields, connectionWaterBytes: Math.round(CONNECTION_WATER * options.limit.bytes) }, 'overloaded: private memory near the limit, closing connections with an unfinished head, oldest first (503 OVERLOADED)')
        }
        closing.heads += heads
        closing.at = now
        counter.inc(heads)
      })
    },
    start: () => { memory.start() },
    stop: () => { memory.stop() },
    status: () => ({
      state: memory.shedding || memory.privateShedding || closing !== undefined || atInFlightCap() || atConnectionBound() ? 'shedding' : 'normal',
      ...memory.status(),
      inFlight: load.inFlight,
      inFlightBodyBytes: load.reserved,
      maxInFlight,
      connections,
      maxConnections,
      ...(followed === undefined ? {} : { heads: followed.status() })
    }),
    readinessNote () {
      const notes = memory.readinessNotes()
      if (atInFlightCap()) notes.push(`at the cap of ${maxInFlight} requests in flight, new requests get 503 OVERLOADED`)
      if (closing !== undefined) notes.push('overloaded: private memory near the limit, connections with an unfinished head get 503 OVERLOADED and are closed, oldest first')
      if (atConnectionBound()) notes.push(`at the bound of ${maxConnections} open connections, new connections get 503 OVERLOADED and are closed`)
      return notes.length === 0 ? undefined : notes.join('; ')
    }
  }
}
