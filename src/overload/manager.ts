// The overload manager: sheds new requests with 503 OVERLOADED before the process outgrows
// its memory limit, or when too many requests are in flight, answers new connections the same
// way beyond a bound on open ones, and stops by itself when the pressure is gone. Envoy's
// overload manager is the model: know the limit, act before it, say so (logs, metrics,
// /readyz's reason, /status).
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import { readPrivateBytes, readSystemFile, readUsageBytes, type MemoryLimit, type MemoryLimitSource } from './memory-limit.js'
import type { Metrics } from '../metrics.js'

/** How often live memory is sampled (the timer is unref'd and re-armed after each run). */
export const SAMPLE_MS = 250
/** A request also samples when the last sample is older than this: a burst is seen within it, not a whole SAMPLE_MS later. */
export const ADMISSION_SAMPLE_MS = 25
/**
 * Shedding starts when live memory reaches this fraction of the limit... The rest of the limit
 * is the process's own (code, stacks, malloc, the heap's free pages): 12-28 MiB over live memory
 * was measured under load, and 75 % of 128 MiB was OOM-killed before live memory got there.
 */
export const HIGH_WATER = 0.6
/** ...and stops when it falls below this one (hysteresis: no flapping at one threshold). */
export const LOW_WATER = 0.45
/**
 * Shedding also starts when the cgroup's own usage reaches this fraction of the limit while live
 * memory is over the low water. The usage holds what live memory cannot see, measured in bursts
 * of 60 KB POSTs: native memory (anonymous memory outside V8's heap and external) from 3 MiB idle
 * to 12-14 MiB at the peak and 20-28 MiB after the loads (not given back), and V8's committed but
 * unused pages (6-10 MiB); once a group reached 120 MiB of 128 while live memory stayed under the
 * high water. Usage alone would shed for ever: it stays high after a burst (65-84 MiB measured)
 * while live memory falls, so shedding still stops below the low water of live memory, and usage
 * cannot start it again until live memory is over that water.
 */
export const USAGE_WATER = 0.7
/**
 * What an admitted request's body is taken to cost, per byte its Content-Length announces, until
 * its answer closes, on top of live memory and usage. The watch sees a body only once it has
 * arrived, and 1000 heads sent at once all arrive before any body, at low memory: counted in
 * advance, the bodies bound admission. Measured: 500 POSTs of 60 KB admitted at once took the
 * cgroup's usage up by 53 MiB, 109 KiB each.
 */
export const BODY_COST = 2
/**
 * A body is counted up to this length: one this short arrives whole and is kept for a replay
 * (proxy.ts REPLAY_BODY_MAX_BYTES); a longer one is streamed upstream under backpressure, not
 * held whole, so its length says nothing of what it holds (and a caller announcing a huge one
 * must not shed everybody else).
 */
export const COUNTED_BODY_MAX_BYTES = 64 * 1024
/**
 * The last line, per request: a new request is admitted only if the process's private memory
 * (RssAnon: what an OOM kill is made of), plus what the requests in flight and the new one are
 * expected to cost, stays under this fraction of the limit. It catches what neither water above
 * sees in time: V8's heap committed far over what is live, or malloc's heap, growing in a
 * burst of GETs on a starved machine (measured once: 103 MiB of 128 in the group with live
 * memory at 58, and the next burst of POSTs, admitted at low live memory, OOM-killed it). As
 * answers close, their costs leave the sum and new requests fit again. Private memory may stay
 * high when nothing is live (malloc keeps freed memory a collection cannot return): so requests
 * are always admitted while fewer than PRIVATE_FLOOR_IN_FLIGHT are in flight, and the sidecar
 * never sheds everything.
 */
export const PRIVATE_WATER = 0.8
/** Requests admitted whatever private memory says, while fewer are in flight: at most some 1.3 MiB of expected costs. */
export const PRIVATE_FLOOR_IN_FLIGHT = 8
/**
 * What an admitted request is expected to cost beside its body (BODY_COST), until its answer
 * closes, in the sum PRIVATE_WATER bounds: its objects, the upstream's answer held for a replay.
 * Measured: 1500 calls answered 401 with 10 KB (500 in flight) took the group up by ~45 MiB,
 * ~90 KiB each, but most of it arrives late enough for the samples (every ADMISSION_SAMPLE_MS)
 * to see it.
 */
export const REQUEST_COST = 32 * 1024
/** The pressure on private memory is over (logged, the gauge, /readyz) once a sample finds the sum this fraction of the limit under PRIVATE_WATER... */
export const PRIVATE_CLEAR = 0.05
/** ...or finds no request shed on it for this long: what says "shedding" must be shedding. */
export const PRIVATE_HOLD_MS = 5_000
/**
 * The bodies of shed requests and of excess connections are read and discarded; every this many
 * bytes of them, a young collection frees what was read. Measured, 500 POSTs of 1 MiB streamed at
 * once, most of them shed: a fresh sidecar peaked at 175-193 MiB without it and 95 MiB with it,
 * and after the four loads in a 128 MiB cgroup the burst went from OOM-killed in 3 runs of 3 to
 * alive in 5 of 6 (bench/README.md).
 */
export const DISCARD_COLLECT_BYTES = 8 * 1024 * 1024
/** At most one forced full collection this often, and only while the samples say shed. */
export const COLLECT_GAP_MS = 1_000
/** Retry-After of a 503 OVERLOADED. */
export const OVERLOAD_RETRY_AFTER_S = 1

/**
 * How long an excess connection, once answered, is still read (and what it sends discarded)
 * before it is closed: closing with the caller's request unread would make the kernel reset
 * the connection, and a reset can destroy the answer before the caller reads it (RFC 9112
 * §9.6, a server's lingering close).
 */
export const EXCESS_LINGER_MS = 2_000

/** Node's own listen backlog, kept when connections are not bounded. */
export const DEFAULT_BACKLOG = 511

/**
 * The proxy listener's accept queue holds as many connections as MAX_CONNECTIONS admits
 * (the kernel caps it at net.core.somaxconn): a burst that arrives while the event loop is
 * busy waits in the queue and is then answered, 503 OVERLOADED for the excess, instead of
 * overflowing it, where a caller's connection waits on SYN retries with backoff (measured:
 * 256 of 3000 callers without an answer after 30 s with Node's 511; bench/README.md).
 */
export function proxyBacklog (maxConnections: number): number {
  return Math.max(DEFAULT_BACKLOG, maxConnections)
}

export type ShedReason = 'memory' | 'in_flight' | 'connections'

/**
 * Live memory: V8's heap in use plus memory outside it held by JS objects (Buffers and other
 * ArrayBuffers, which `external` already includes: adding `arrayBuffers` would count them twice).
 * Not RSS: glibc keeps freed pages, so RSS stays high after a burst and a manager watching it
 * would shed for ever.
 */
export function liveBytes (usage: Pick<NodeJS.MemoryUsage, 'heapUsed' | 'external'> = process.memoryUsage()): number {
  return usage.heapUsed + usage.external
}

/**
 * A full collection, so that shedding is decided on what is truly alive. Garbage of a burst
 * stays counted in heapUsed and external until a major GC, and a sidecar that sheds allocates
 * too little to trigger one: without this it could shed for ever (measured: 79 MiB of dropped
 * objects still counted 15 s later). V8's gc() is reached without --expose-gc on the command
 * line: the flag is set at run time and the function taken from a fresh context, so the main
 * context's globals stay unchanged.
 */
export function fullCollection (): () => void {
  const gc = exposedGc()
  return () => { gc() }
}

/**
 * A young-generation collection (a scavenge, about 1 ms): it frees the ArrayBuffers that died
 * young, such as a discarded body's reads, which V8 otherwise lets pile up (some 64 MiB of them
 * outside its heap) before it collects.
 */
export function youngCollection (): () => void {
  const gc = exposedGc()
  return () => { gc({ type: 'minor' }) }
}

function exposedGc (): (options?: { type: 'minor' | 'major' }) => void {
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as (options?: { type: 'minor' | 'major' }) => void
}

/**
 * Hysteresis: shed from HIGH_WATER of the limit up, or from USAGE_WATER of the cgroup's usage up
 * with live memory over LOW_WATER, until live memory is below LOW_WATER. No limit (0): never.
 * `usage` is read only when it can matter (not shedding, live memory between the waters);
 * undefined when unknown.
 */
export function shouldShed (shedding: boolean, live: number, limitBytes: number, usage: () => number | undefined = () => undefined): boolean {
  if (limitBytes <= 0) return false
  if (live < LOW_WATER * limitBytes) return false
  if (shedding || live >= HIGH_WATER * limitBytes) return true
  return (usage() ?? 0) >= USAGE_WATER * limitBytes
}

export interface OverloadStatus {
  state: 'normal' | 'shedding'
  /** Shedding on memory (live memory crossed the high water, not yet below the low water). */
  memoryShedding: boolean
  /** Requests shed because they would not fit under PRIVATE_WATER, not yet cleared by a sample. */
  privateShedding: boolean
  limitBytes: number
  limitSource: MemoryLimitSource
  limitFile: string | null
  liveBytes: number
  highWaterBytes: number
  lowWaterBytes: number
  /** The cgroup's usage as last read (only read with live memory between the waters); null when never read or unknown. */
  usageBytes: number | null
  usageWaterBytes: number
  /** The process's private memory (RssAnon) as last sampled; null when unknown (not Linux). */
  privateBytes: number | null
  privateWaterBytes: number
  /** What the requests in flight are expected to cost in private memory: REQUEST_COST each, and their bodies. */
  inFlightCostBytes: number
  inFlight: number
  /** What the bodies of the requests in flight are counted for (BODY_COST times their announced length), on top of live memory and usage. */
  inFlightBodyBytes: number
  /** 0: no cap. */
  maxInFlight: number
  /** Connections open on the proxy listener (the answered excess not counted). */
  connections: number
  /** 0: no bound. */
  maxConnections: number
}

export interface OverloadOptions {
  limit: MemoryLimit
  /** MAX_IN_FLIGHT_REQUESTS; 0 for no cap. */
  maxInFlight: number
  /** MAX_CONNECTIONS; 0 for no bound. */
  maxConnections?: number
  clock: Clock
  log: Pick<Logger, 'info' | 'warn'>
  metrics: Pick<Metrics, 'overloadShedding' | 'overloadShed' | 'memoryLimitBytes' | 'measureLiveMemory' | 'measurePrivateMemory'>
  /** Live memory in bytes (liveBytes by default; tests inject their own). */
  readLiveBytes?: () => number
  /** The cgroup's usage in bytes, or undefined when unknown (limit.usageFile by default). */
  readUsageBytes?: () => number | undefined
  /** The process's private memory in bytes, or undefined when unknown (readPrivateBytes by default). */
  readPrivateBytes?: () => number | undefined
  /** A full garbage collection (fullCollection by default, created only when a limit is known). */
  collect?: () => void
  /** A young-generation collection (youngCollection by default, created at the first discarded byte). */
  collectYoung?: () => void
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
  /** Starts sampling (the first sample at once); stop() ends it. */
  start: () => void
  stop: () => void
  status: () => OverloadStatus
  /** What /readyz adds to its reason while shedding; undefined otherwise. */
  readinessNote: () => string | undefined
}

const counted = (bodyBytes: number): number => BODY_COST * Math.min(bodyBytes, COUNTED_BODY_MAX_BYTES)
const mib = (bytes: number): string => `${Math.round(bytes / 2 ** 20)} MiB`

export function createOverloadManager (options: OverloadOptions): OverloadManager {
  const { limit, maxInFlight, maxConnections = 0, clock, log, metrics, readLiveBytes = liveBytes, readPrivateBytes: readPrivate = () => readPrivateBytes() } = options
  const { usageFile } = limit
  const readUsage = options.readUsageBytes ?? (usageFile === undefined ? () => undefined : () => readUsageBytes(readSystemFile, usageFile))
  const watching = limit.bytes > 0
  const collect = options.collect ?? (watching ? fullCollection() : () => {})
  let live = 0
  /** The cgroup's usage, read at most once per sample and only when it can matter. */
  let usage: number | undefined
  let usageRead = false
  let reserved = 0
  /** Private memory as last sampled. */
  let privateBytes: number | undefined
  let privateShedding = false
  /** A request was shed on private memory since the last forced collection. */
  let privateShedSinceCollect = false
  let privateShedAt = -Infinity
  let sampledAt = -Infinity
  let discardedBytes = 0
  let collectYoung = options.collectYoung
  let collectedAt = -Infinity
  let shedding = false
  let inFlight = 0
  let connections = 0
  let stopTimer: (() => void) | undefined
  const shed = {
    memory: metrics.overloadShed.labels('memory'),
    in_flight: metrics.overloadShed.labels('in_flight'),
    connections: metrics.overloadShed.labels('connections')
  }
  const atInFlightCap = (): boolean => maxInFlight > 0 && inFlight >= maxInFlight
  const atConnectionBound = (): boolean => maxConnections > 0 && connections >= maxConnections
  metrics.memoryLimitBytes.set(limit.bytes)
  metrics.overloadShedding.set(0)
  const currentLive = (): number => watching ? live : readLiveBytes()
  metrics.measureLiveMemory(currentLive)
  const currentPrivate = (): number | undefined => watching ? privateBytes : readPrivate()
  metrics.measurePrivateMemory(currentPrivate)
  const privateWater = PRIVATE_WATER * limit.bytes
  /** What the requests in flight are expected to cost in private memory. */
  const inFlightCost = (): number => inFlight * REQUEST_COST + reserved
  const showShedding = (): void => { metrics.overloadShedding.set(shedding || privateShedding ? 1 : 0) }

  const currentUsage = (): number | undefined => {
    if (!usageRead) {
      usage = readUsage()
      usageRead = true
    }
    return usage === undefined ? undefined : usage + reserved
  }

  /** Reads live memory and moves the memory state; true when the samples say shed. */
  function sample (): boolean {
    live = readLiveBytes()
    privateBytes = readPrivate()
    usageRead = false
    sampledAt = clock.now()
    if (privateShedding && (privateBytes === undefined || privateBytes + inFlightCost() <= privateWater - PRIVATE_CLEAR * limit.bytes ||
      clock.now() - privateShedAt >= PRIVATE_HOLD_MS)) {
      privateShedding = false
      showShedding()
      log.info({ privateBytes, inFlightCostBytes: inFlightCost(), limitBytes: limit.bytes }, 'private memory no longer near the limit: accepting new requests')
    }
    return update()
  }

  /** Whether a new request costing this much fits under the private water; it always does below PRIVATE_FLOOR_IN_FLIGHT. */
  function fitsPrivate (cost: number): boolean {
    if (!watching || privateBytes === undefined || inFlight < PRIVATE_FLOOR_IN_FLIGHT || privateBytes + inFlightCost() + cost <= privateWater) return true
    privateShedSinceCollect = true
    privateShedAt = clock.now()
    if (!privateShedding) {
      privateShedding = true
      showShedding()
      log.warn({ privateBytes, inFlightCostBytes: inFlightCost(), limitBytes: limit.bytes, privateWaterBytes: Math.round(privateWater) }, 'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)')
    }
    return false
  }

  /** Moves the memory state on the last sample and the bodies now in flight. */
  function update (): boolean {
    const next = shouldShed(shedding, live + reserved, limit.bytes, currentUsage)
    if (next !== shedding) {
      shedding = next
      showShedding()
      const fields = { liveBytes: live, limitBytes: limit.bytes }
      if (next) log.warn({ ...fields, inFlightBodyBytes: reserved, usageBytes: usage, water: live + reserved >= HIGH_WATER * limit.bytes ? 'live memory' : 'cgroup usage' }, 'overloaded: shedding new requests (503 OVERLOADED)')
      else log.info({ ...fields, lowWaterBytes: Math.round(LOW_WATER * limit.bytes) }, 'no longer overloaded: accepting new requests')
    }
    return next
  }

  function tick (): void {
    // While the samples say shed, collect what is dead so the next sample (a tick later: Buffers'
    // memory is released just after the collection) tells live memory from garbage. On private
    // memory, only while requests are shed on it: at rest, memory that stays high costs no
    // collection a second.
    if ((sample() || privateShedSinceCollect) && clock.now() - collectedAt >= COLLECT_GAP_MS) {
      collectedAt = clock.now()
      privateShedSinceCollect = false
      collect()
    }
    stopTimer = clock.setTimer(tick, SAMPLE_MS)
  }

  return {
    admit (bodyBytes = 0, headerBytes = 0) {
      if (watching) {
        if (clock.now() - sampledAt >= ADMISSION_SAMPLE_MS) sample()
        else update()
      }
      const cost = counted(bodyBytes) + headerBytes
      const reason: ShedReason | undefined = shedding || !fitsPrivate(REQUEST_COST + cost) ? 'memory' : atInFlightCap() ? 'in_flight' : undefined
      if (reason === undefined) {
        inFlight += 1
        reserved += cost
      } else {
        shed[reason].inc()
      }
      return reason
    },
    leave (bodyBytes = 0, headerBytes = 0) {
      inFlight -= 1
      reserved -= counted(bodyBytes) + headerBytes
    },
    discarded (bytes) {
      discardedBytes += bytes
      if (discardedBytes < DISCARD_COLLECT_BYTES) return
      discardedBytes %= DISCARD_COLLECT_BYTES
      collectYoung ??= youngCollection()
      collectYoung()
    },
    connect () {
      if (atConnectionBound()) {
        shed.connections.inc()
        return 'connections'
      }
      connections += 1
      return undefined
    },
    disconnect () { connections -= 1 },
    start () {
      if (watching && stopTimer === undefined) tick()
    },
    stop () {
      stopTimer?.()
      stopTimer = undefined
    },
    status: () => ({
      state: shedding || privateShedding || atInFlightCap() || atConnectionBound() ? 'shedding' : 'normal',
      memoryShedding: shedding,
      privateShedding,
      limitBytes: limit.bytes,
      limitSource: limit.source,
      limitFile: limit.file ?? null,
      liveBytes: currentLive(),
      highWaterBytes: Math.round(HIGH_WATER * limit.bytes),
      lowWaterBytes: Math.round(LOW_WATER * limit.bytes),
      usageBytes: usage ?? null,
      usageWaterBytes: Math.round(USAGE_WATER * limit.bytes),
      privateBytes: currentPrivate() ?? null,
      privateWaterBytes: Math.round(privateWater),
      inFlightCostBytes: inFlightCost(),
      inFlight,
      inFlightBodyBytes: reserved,
      maxInFlight,
      connections,
      maxConnections
    }),
    readinessNote () {
      const notes: string[] = []
      if (shedding) notes.push(`overloaded: live memory ${mib(live)} and ${mib(reserved)} for bodies in flight over ${HIGH_WATER * 100} % of the ${mib(limit.bytes)} limit (or the cgroup's usage over ${USAGE_WATER * 100} %), new requests get 503 OVERLOADED until live memory is below ${LOW_WATER * 100} %`)
      if (privateShedding) notes.push(`overloaded: private memory ${mib(privateBytes ?? 0)} and ${mib(inFlightCost())} expected of the requests in flight near ${PRIVATE_WATER * 100} % of the ${mib(limit.bytes)} limit, new requests that would not fit get 503 OVERLOADED`)
      if (atInFlightCap()) notes.push(`at the cap of ${maxInFlight} requests in flight, new requests get 503 OVERLOADED`)
      if (atConnectionBound()) notes.push(`at the bound of ${maxConnections} open connections, new connections get 503 OVERLOADED and are closed`)
      return notes.length === 0 ? undefined : notes.join('; ')
    }
  }
}
