// The overload manager's memory side: it samples live memory, the cgroup's usage and private
// memory against the limit, moves the shedding states on them, and forces the collections that
// keep the samples honest. The manager asks it at each admission (manager.ts).
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { Metrics } from '../metrics.js'
import { readPrivateBytes, readSystemFile, readUsageBytes, type MemoryLimit, type MemoryLimitSource } from './memory-limit.js'
import {
  ADMISSION_SAMPLE_MS, COLLECT_GAP_MS, COLLECT_SHARE, DISCARD_COLLECT_BYTES, HIGH_WATER, LOW_WATER, PRIVATE_CLEAR, PRIVATE_FLOOR_IN_FLIGHT,
  PRIVATE_HOLD_MS, PRIVATE_WATER, REQUEST_COST, SAMPLE_MS, shouldShed, USAGE_WATER
} from './waters.js'

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
 * A full collection, so that shedding is decided on what is truly alive: a shedding sidecar
 * allocates too little to trigger one (docs/overload.md#why-these-numbers).
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

/** V8's gc(), with the options its extension takes. */
export type Gc = (options?: { type: 'minor' | 'major', execution?: 'sync' | 'async', flavor?: 'regular' | 'last-resort' }) => void

/**
 * V8's gc(): the global one where node was started with --expose-gc, as the image and `npm
 * start` run it (cli/shipped.ts). Otherwise the flag is set at run time and gc taken from a new
 * context, which works but costs: a second context made a plain node:http server's requests
 * about 9 % dearer in CPU (bench/RESULTS.md, 2026-12-03).
 */
export function exposedGc (): Gc {
  if (typeof globalThis.gc === 'function') return globalThis.gc as Gc
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as Gc
}

/** The memory part of the overload manager's status (manager.ts OverloadStatus). */
export interface MemoryStatus {
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
}

export interface MemoryWatchOptions {
  limit: MemoryLimit
  clock: Clock
  log: Pick<Logger, 'info' | 'warn'>
  metrics: Pick<Metrics, 'overloadShedding' | 'memoryLimitBytes' | 'measureLiveMemory' | 'measurePrivateMemory'>
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
  /**
   * Memory others hold and can give back (the read cache's copies): asked for about `bytes`
   * before requests are shed on live memory, it returns the bytes it gave back.
   */
  giveWay?: (bytes: number) => number
  /** The process's CPU time in ms, all threads (processCpuMs by default; tests inject their own). */
  readCpuMs?: () => number
}

/** The process's CPU time so far, user and system, in ms. */
export function processCpuMs (): number {
  const { user, system } = process.cpuUsage()
  return (user + system) / 1000
}

/**
 * The gap before the next forced collection, after one that took `wallMs` and `cpuMs`: its own
 * length (the shorter: a starved process's waits are not collecting, V8's helper threads are
 * not the event loop's stop) over COLLECT_SHARE, from COLLECT_GAP_MS to PRIVATE_HOLD_MS.
 */
export function collectGap (wallMs: number, cpuMs: number): number {
  const ownMs = Math.max(0, Math.min(wallMs, cpuMs))
  return Math.min(PRIVATE_HOLD_MS, Math.max(COLLECT_GAP_MS, ownMs * (1 / COLLECT_SHARE - 1)))
}

/** What the manager has admitted and not yet seen leave: the memory watch reads it, the manager counts it. */
export interface Load {
  /** Requests in flight. */
  inFlight: number
  /** Bytes counted for their bodies (BODY_COST) and header fields. */
  reserved: number
}

const mib = (bytes: number): string => `${Math.round(bytes / 2 ** 20)} MiB`

export class MemoryWatch {
  /** A limit is known: memory is sampled and shed on (without one, nothing is). */
  readonly watching: boolean
  readonly #limit: MemoryLimit
  readonly #clock: Clock
  readonly #log: MemoryWatchOptions['log']
  readonly #metrics: MemoryWatchOptions['metrics']
  readonly #load: Readonly<Load>
  readonly #readLive: () => number
  readonly #readUsage: () => number | undefined
  readonly #readPrivate: () => number | undefined
  readonly #collect: () => void
  readonly #giveWay: ((bytes: number) => number) | undefined
  readonly #readCpuMs: () => number
  #collectYoung: (() => void) | undefined
  readonly #privateWater: number
  #live = 0
  /** The cgroup's usage, read at most once per sample and only when it can matter. */
  #usage: number | undefined
  #usageRead = false
  /** Private memory as last sampled. */
  #privateBytes: number | undefined
  #privateShedding = false
  /** A request was shed on private memory since the last forced collection. */
  #privateShedSinceCollect = false
  #privateShedAt = -Infinity
  #sampledAt = -Infinity
  #discardedBytes = 0
  /** When the last forced collection ended, and the gap before the next (collectGap: COLLECT_GAP_MS, longer after a long one). */
  #collectedAt = -Infinity
  #collectGapMs = COLLECT_GAP_MS
  #shedding = false
  #closingHeads = false
  #stopTimer: (() => void) | undefined
  #afterSample: (() => void) | undefined

  constructor (options: MemoryWatchOptions, load: Readonly<Load>) {
    const { limit, metrics } = options
    const { usageFile } = limit
    this.#limit = limit
    this.#clock = options.clock
    this.#log = options.log
    this.#metrics = metrics
    this.#load = load
    this.#readLive = options.readLiveBytes ?? liveBytes
    this.#readUsage = options.readUsageBytes ?? (usageFile === undefined ? () => undefined : () => readUsageBytes(readSystemFile, usageFile))
    this.#readPrivate = options.readPrivateBytes ?? (() => readPrivateBytes())
    this.watching = limit.bytes > 0
    this.#collect = options.collect ?? (this.watching ? fullCollection() : () => {})
    this.#collectYoung = options.collectYoung
    this.#giveWay = options.giveWay
    this.#readCpuMs = options.readCpuMs ?? processCpuMs
    this.#privateWater = PRIVATE_WATER * limit.bytes
    metrics.memoryLimitBytes.set(limit.bytes)
    metrics.overloadShedding.set(0)
    metrics.measureLiveMemory(() => this.#currentLive())
    metrics.measurePrivateMemory(() => this.#currentPrivate())
  }

  /** Shedding on live memory and the cgroup's usage, with the waters' hysteresis. */
  get shedding (): boolean { return this.#shedding }
  /** Requests were shed on private memory, and no sample has cleared it yet. */
  get privateShedding (): boolean { return this.#privateShedding }

  /** Brings the memory states up to date for an admission: a sample if the last is older than ADMISSION_SAMPLE_MS, else the waters on the bodies now in flight. */
  refresh (): void {
    if (!this.watching) return
    if (this.#clock.now() - this.#sampledAt >= ADMISSION_SAMPLE_MS) this.#sample()
    else this.#update()
  }

  /** Whether a new request costing this much fits under the private water; it always does below PRIVATE_FLOOR_IN_FLIGHT. */
  fitsPrivate (cost: number): boolean {
    return !this.watching || this.#privateBytes === undefined || this.#load.inFlight < PRIVATE_FLOOR_IN_FLIGHT ||
      this.#privateBytes + this.#inFlightCost() + cost <= this.#privateWater
  }

  /** A request did not fit under the private water and is shed: the pressure is reported, and a collection asked. */
  shedOnPrivate (): void {
    this.#privateShedSinceCollect = true
    this.#privateShedAt = this.#clock.now()
    if (this.#privateShedding) return
    this.#privateShedding = true
    this.#showShedding()
    this.#log.warn({ privateBytes: this.#privateBytes, inFlightCostBytes: this.#inFlightCost(), limitBytes: this.#limit.bytes, privateWaterBytes: Math.round(this.#privateWater) }, 'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)')
  }

  /**
   * How far the last sample's private memory, with the costs in flight, stands over `water` of
   * the limit (negative: under it); undefined when not watched or unknown.
   */
  privateOver (water: number): number | undefined {
    if (!this.watching || this.#privateBytes === undefined) return undefined
    return this.#privateBytes + this.#inFlightCost() - water * this.#limit.bytes
  }

  /** The next timed sample forces a full collection (unless one ran within COLLECT_GAP_MS, or longer: COLLECT_SHARE). */
  askCollection (): void { this.#privateShedSinceCollect = true }

  /** Unfinished heads are closed on private memory (manager.ts), or no longer: the shedding gauge says so too. */
  showClosingHeads (closing: boolean): void {
    this.#closingHeads = closing
    this.#showShedding()
  }

  /** `fn` runs after each timed sample (not those of admissions). */
  afterSample (fn: () => void): void { this.#afterSample = fn }

  /** Bytes of a shed body were read and dropped: every DISCARD_COLLECT_BYTES, a young collection. */
  discarded (bytes: number): void {
    this.#discardedBytes += bytes
    if (this.#discardedBytes < DISCARD_COLLECT_BYTES) return
    this.#discardedBytes %= DISCARD_COLLECT_BYTES
    this.#collectYoung ??= youngCollection()
    this.#collectYoung()
  }

  /** Starts sampling (the first sample at once) when a limit is known; stop() ends it. */
  start (): void {
    if (this.watching && this.#stopTimer === undefined) this.#tick()
  }

  stop (): void {
    this.#stopTimer?.()
    this.#stopTimer = undefined
  }

  status (): MemoryStatus {
    const limit = this.#limit
    return {
      memoryShedding: this.#shedding,
      privateShedding: this.#privateShedding,
      limitBytes: limit.bytes,
      limitSource: limit.source,
      limitFile: limit.file ?? null,
      liveBytes: this.#currentLive(),
      highWaterBytes: Math.round(HIGH_WATER * limit.bytes),
      lowWaterBytes: Math.round(LOW_WATER * limit.bytes),
      usageBytes: this.#usage ?? null,
      usageWaterBytes: Math.round(USAGE_WATER * limit.bytes),
      privateBytes: this.#currentPrivate() ?? null,
      privateWaterBytes: Math.round(this.#privateWater),
      inFlightCostBytes: this.#inFlightCost()
    }
  }

  /** What /readyz says of memory while shedding on it; none otherwise. */
  readinessNotes (): string[] {
    const notes: string[] = []
    const limit = mib(this.#limit.bytes)
    if (this.#shedding) notes.push(`overloaded: live memory ${mib(this.#live)} and ${mib(this.#load.reserved)} for bodies in flight over ${HIGH_WATER * 100} % of the ${limit} limit (or the cgroup's usage over ${USAGE_WATER * 100} %), new requests get 503 OVERLOADED until live memory is below ${LOW_WATER * 100} %`)
    if (this.#privateShedding) notes.push(`overloaded: private memory ${mib(this.#privateBytes ?? 0)} and ${mib(this.#inFlightCost())} expected of the requests in flight near ${PRIVATE_WATER * 100} % of the ${limit} limit, new requests that would not fit get 503 OVERLOADED`)
    return notes
  }

  #currentLive (): number { return this.watching ? this.#live : this.#readLive() }
  #currentPrivate (): number | undefined { return this.watching ? this.#privateBytes : this.#readPrivate() }
  /** What the requests in flight are expected to cost in private memory. */
  #inFlightCost (): number { return this.#load.inFlight * REQUEST_COST + this.#load.reserved }
  #showShedding (): void { this.#metrics.overloadShedding.set(this.#shedding || this.#privateShedding || this.#closingHeads ? 1 : 0) }

  #currentUsage (): number | undefined {
    if (!this.#usageRead) {
      this.#usage = this.#readUsage()
      this.#usageRead = true
    }
    return this.#usage === undefined ? undefined : this.#usage + this.#load.reserved
  }

  /** Reads live memory and moves the memory states; true when the samples say shed. */
  #sample (): boolean {
    this.#live = this.#readLive()
    this.#privateBytes = this.#readPrivate()
    this.#usageRead = false
    this.#sampledAt = this.#clock.now()
    if (this.#privateShedding && (this.#privateBytes === undefined ||
      this.#privateBytes + this.#inFlightCost() <= this.#privateWater - PRIVATE_CLEAR * this.#limit.bytes ||
      this.#clock.now() - this.#privateShedAt >= PRIVATE_HOLD_MS)) {
      this.#privateShedding = false
      this.#showShedding()
      this.#log.info({ privateBytes: this.#privateBytes, inFlightCostBytes: this.#inFlightCost(), limitBytes: this.#limit.bytes }, 'private memory no longer near the limit: accepting new requests')
    }
    return this.#update()
  }

  /** Moves the memory state on the last sample and the bodies now in flight: what gives way first, when it would shed. */
  #update (): boolean {
    const reserved = this.#load.reserved
    const shed = (): boolean => shouldShed(this.#shedding, this.#live + reserved, this.#limit.bytes, () => this.#currentUsage())
    let next = shed()
    if (next && !this.#shedding && this.#gaveWay(reserved)) next = shed()
    if (next !== this.#shedding) {
      this.#shedding = next
      this.#showShedding()
      const fields = { liveBytes: this.#live, limitBytes: this.#limit.bytes }
      if (next) this.#log.warn({ ...fields, inFlightBodyBytes: reserved, usageBytes: this.#usage, water: this.#live + reserved >= HIGH_WATER * this.#limit.bytes ? 'live memory' : 'cgroup usage' }, 'overloaded: shedding new requests (503 OVERLOADED)')
      else this.#log.info({ ...fields, lowWaterBytes: Math.round(LOW_WATER * this.#limit.bytes) }, 'no longer overloaded: accepting new requests')
    }
    return next
  }

  /**
   * Before shedding starts, what can give way (the read cache) is asked for memory down to
   * LOW_WATER, and a full collection frees it: a cache never makes the sidecar refuse
   * callers. True when it gave some back; live memory is then read again (the dropped
   * Buffers' external memory may be released a moment later: it is taken off meanwhile).
   */
  #gaveWay (reserved: number): boolean {
    const gave = this.#giveWay?.(this.#live + reserved - LOW_WATER * this.#limit.bytes) ?? 0
    if (gave <= 0) return false
    const before = this.#live
    this.#collect()
    this.#collectedAt = this.#clock.now()
    this.#live = Math.min(this.#readLive(), before - gave)
    this.#log.info({ gaveBytes: gave, liveBytes: before, nowLiveBytes: this.#live, limitBytes: this.#limit.bytes }, 'memory near the high water: the read cache gave way (copies dropped, least recently used first) before any request was shed')
    return true
  }

  #tick (): void {
    // While the samples say shed, collect what is dead so the next sample (a tick later: Buffers'
    // memory is released just after the collection) tells live memory from garbage. On private
    // memory, only while requests are shed on it: at rest, memory that stays high costs no
    // collection a second.
    if ((this.#sample() || this.#privateShedSinceCollect) && this.#clock.now() - this.#collectedAt >= this.#collectGapMs) {
      this.#privateShedSinceCollect = false
      const started = this.#clock.now()
      const cpuBefore = this.#readCpuMs()
      this.#collect()
      this.#collectedAt = this.#clock.now()
      this.#collectGapMs = collectGap(this.#collectedAt - started, this.#readCpuMs() - cpuBefore)
    }
    this.#afterSample?.()
    this.#stopTimer = this.#clock.setTimer(() => { this.#tick() }, SAMPLE_MS)
  }
}
