// A stored answer, how it crosses Redis (one buffer: its description, then TI's bytes), and
// the sidecar's own copies: in memory, bounded by bytes, the least recently used evicted first
// (lru-cache). Lifetimes are measured on the monotonic clock; in Redis, on Redis's (the entry
// says when it was stored, by Redis's clock), so that every sidecar reads the same age
// whatever its own clock says, and however late a store reached Redis.
import { LRUCache } from 'lru-cache'
import type { Clock } from '../clock.js'

export interface Entry {
  readonly status: number
  /** TI's headers, hop-by-hop ones dropped, as they are served (Age is added then). */
  readonly headers: Readonly<Record<string, string | string[]>>
  readonly body: Buffer
  readonly freshMs: number
  readonly staleMs: number
  readonly initialAgeMs: number
  readonly vary: ReadonlyArray<readonly [string, string]>
  /** The rule it was stored for, and its path without query values: for /status and the metrics. */
  readonly rule: string
  readonly display: string
  /** The digest of its target URI (policy.ts uriKey): a write to it drops the entry. */
  readonly uri: string
  /** When it was stored, on this sidecar's monotonic clock (for a copy from Redis: when it would have been). */
  readonly storedAt: number
}

/** An entry's standing at `now`. */
export interface Standing {
  /** Its age, TI's Age included. */
  ageMs: number
  /** Freshness left: negative once stale. */
  ttlMs: number
  fresh: boolean
  /** Fresh, or stale within `stale=`. */
  usable: boolean
}

export function standing (entry: Entry, now: number): Standing {
  const resident = Math.max(0, now - entry.storedAt)
  const ttlMs = entry.freshMs - resident
  return { ageMs: resident + entry.initialAgeMs, ttlMs, fresh: ttlMs > 0, usable: ttlMs + entry.staleMs > 0 }
}

/** How long an entry is kept at all, from when it was stored. */
export const lifetimeMs = (entry: Pick<Entry, 'freshMs' | 'staleMs'>): number => entry.freshMs + entry.staleMs

/**
 * `body` in memory of its own: a small Buffer is a slice of Node's shared 8 KiB pool, one
 * read from Redis a slice of its whole reply, and a kept slice keeps all of it alive, beyond
 * what the entry is counted for (docs/read-cache.md, "What an entry costs").
 */
export function ownBytes (body: Buffer): Buffer {
  // All of its memory (so at offset 0): nothing else kept alive.
  if (body.buffer.byteLength === body.length) return body
  const own = Buffer.allocUnsafeSlow(body.length)
  body.copy(own)
  return own
}

/**
 * What an entry costs in live memory (V8's heap in use and external, what the overload manager
 * watches) beside its parts: the entry, its headers' object, its body's Buffer and
 * ArrayBuffer, its key, target and path strings, lru-cache's slots and the byUri index.
 * Measured, with FIELD_BYTES, in docs/read-cache.md#what-an-entry-costs.
 */
export const ENTRY_BYTES = 900
/** What a header field (or a Vary digest, or one value of a list) costs beside its characters: its strings' headers and its slot. */
export const FIELD_BYTES = 64

/** The live memory an entry takes, as measured: ENTRY_BYTES, its body, its path, and each header field and Vary digest with its characters. */
export function entrySize (entry: Entry): number {
  let size = ENTRY_BYTES + entry.body.length + entry.display.length
  for (const [name, value] of Object.entries(entry.headers)) {
    size += FIELD_BYTES + name.length
    if (typeof value === 'string') size += value.length
    else for (const one of value) size += FIELD_BYTES + one.length
  }
  for (const [name, digest] of entry.vary) size += FIELD_BYTES + name.length + digest.length
  return size
}

/**
 * The layout of an entry in Redis (1: before the version was written). Sidecars of another
 * version (a rolling update) read each other's entries as misses, never as answers.
 */
export const ENTRY_VERSION = 2

interface Description extends Omit<Entry, 'body' | 'storedAt'> {
  readonly v: number
  /** When it was stored, on Redis's clock (ms since the epoch): every sidecar's age of it. */
  readonly storedAtMs: number
  /** The body's length: a buffer that holds another is not this entry. */
  readonly bytes: number
}

/** One buffer for Redis: the description's length (4 bytes), the description as JSON, then the body. */
export function encodeEntry (entry: Entry, storedAtMs: number): Buffer {
  const { body, storedAt: _local, ...rest } = entry
  const description: Description = { v: ENTRY_VERSION, ...rest, storedAtMs, bytes: body.length }
  const json = Buffer.from(JSON.stringify(description))
  const head = Buffer.alloc(4)
  head.writeUInt32BE(json.length)
  return Buffer.concat([head, json, body])
}

const isString = (value: unknown): boolean => typeof value === 'string'
const isMs = (value: unknown): boolean => typeof value === 'number' && Number.isFinite(value) && value >= 0
const isStatus = (value: unknown): boolean => Number.isInteger(value) && (value as number) >= 100 && (value as number) <= 599
const isHeaders = (value: unknown): boolean => typeof value === 'object' && value !== null && !Array.isArray(value) &&
  Object.values(value).every((v) => isString(v) || (Array.isArray(v) && v.every(isString)))
const isVary = (value: unknown): boolean => Array.isArray(value) &&
  value.every((pair) => Array.isArray(pair) && pair.length === 2 && pair.every(isString))

/** What each field of a description must hold: anything else is not an entry of this version. */
const FIELDS: ReadonlyArray<readonly [keyof Description, (value: unknown) => boolean]> = [
  ['v', (value) => value === ENTRY_VERSION],
  ['status', isStatus],
  ['headers', isHeaders],
  ['freshMs', isMs],
  ['staleMs', isMs],
  ['initialAgeMs', isMs],
  ['storedAtMs', isMs],
  ['vary', isVary],
  ['rule', isString],
  ['display', isString],
  ['uri', isString],
  ['bytes', isMs]
]

/**
 * An entry read from Redis when Redis's clock reads `redisNowMs`, dated on this sidecar's
 * clock (`now`); or, when the buffer is not a complete entry of this version, what is wrong
 * with it (never a throw: whatever Redis holds, a caller gets a miss, not a failure).
 */
export function decodeEntry (buffer: Buffer, redisNowMs: number, now: number): Entry | string {
  let length: number
  let description: unknown
  try {
    length = buffer.readUInt32BE(0)
    description = JSON.parse(buffer.subarray(4, 4 + length).toString())
  } catch {
    return 'not an entry'
  }
  if (typeof description !== 'object' || description === null) return 'not an entry'
  const fields = description as Record<string, unknown>
  const wrong = FIELDS.find(([name, valid]) => !valid(fields[name]))
  if (wrong !== undefined) return wrong[0] === 'v' ? 'another version' : `its ${wrong[0]} is wrong`
  const body = buffer.subarray(4 + length)
  if (body.length !== fields.bytes) return 'its body is cut'
  const { v: _v, storedAtMs, bytes: _bytes, ...entry } = description as Description
  // A Redis clock that went back (a failover) makes nothing younger than stored.
  return { ...entry, body: ownBytes(body), storedAt: now - Math.max(0, redisNowMs - storedAtMs) }
}

/** Lapsed entries are purged at the soonest lapse, but no more often than this. */
export const PURGE_MS = 30_000

export interface MemoryStoreOptions {
  clock: Clock
  maxBytes: number
  /** An entry was evicted to make room (not: expired or replaced). */
  onEvict: (entry: Entry) => void
}

/** The sidecar's own copies: at most `maxBytes`, the least recently used evicted first. */
export function createMemoryStore ({ clock, maxBytes, onEvict }: MemoryStoreOptions) {
  /** The ids held for each target URI: what a write to it drops. */
  const byUri = new Map<string, Set<string>>()
  const lru = new LRUCache<string, Entry>({
    maxSize: maxBytes,
    sizeCalculation: entrySize,
    dispose: (entry, id, reason) => {
      const ids = byUri.get(entry.uri)
      ids?.delete(id)
      if (ids?.size === 0) byUri.delete(entry.uri)
      if (reason === 'evict') onEvict(entry)
    }
  })
  /** Drops every entry past its lifetime (stale= included): the bytes they were counted for. */
  function purge (): number {
    const now = clock.now()
    const before = lru.calculatedSize
    // Stryker disable next-line ArrayDeclaration: equivalent: deleting an id the cache does not hold does nothing
    const lapsed: string[] = []
    for (const [id, entry] of lru.entries()) if (!standing(entry, now).usable) lapsed.push(id)
    for (const id of lapsed) lru.delete(id)
    return before - lru.calculatedSize
  }
  /** When the purge timer fires (Infinity: not armed), when the last purge ran, and how to cancel it; undefined until startPurging(). */
  let purging: { at: number, lastAt: number, cancel: () => void } | undefined
  /** Arms the purge for an entry that lapses at `end`: at the soonest lapse, PURGE_MS after the last purge at the earliest. */
  function purgeBy (end: number): void {
    if (purging === undefined) return
    const at = Math.max(end, purging.lastAt + PURGE_MS)
    // Stryker disable next-line EqualityOperator: equivalent: a timer armed again for the moment it is already armed for
    if (at >= purging.at) return
    purging.cancel()
    purging.at = at
    // stopPurging() cancels it: it never runs once purging is undefined.
    purging.cancel = clock.setTimer(() => {
      purging = { at: Infinity, lastAt: clock.now(), cancel: () => {} }
      purge()
      for (const entry of lru.values()) purgeBy(entry.storedAt + lifetimeMs(entry))
    }, at - clock.now())
  }
  return {
    /** The entry under `id`, if it is still usable (one past `stale=` is dropped). */
    get (id: string): Entry | undefined {
      const entry = lru.get(id)
      if (entry === undefined) return undefined
      if (standing(entry, clock.now()).usable) return entry
      lru.delete(id)
      return undefined
    },
    /** Keeps `entry` (false: larger than the whole store). */
    set (id: string, entry: Entry): boolean {
      if (entrySize(entry) > maxBytes) return false
      lru.set(id, entry)
      purgeBy(entry.storedAt + lifetimeMs(entry))
      const ids = byUri.get(entry.uri) ?? new Set()
      byUri.set(entry.uri, ids.add(id))
      return true
    },
    /** Drops every copy of the target URI `uri` (whatever its keyed headers): how many there were. */
    drop (uri: string): number {
      const ids = [...byUri.get(uri) ?? []]
      for (const id of ids) lru.delete(id)
      return ids.length
    },
    purge,
    /** From now on the entries past their lifetime are dropped by a timer, requests or none (a shedding sidecar looks none up). */
    startPurging (): void {
      if (purging !== undefined) return
      purging = { at: Infinity, lastAt: -Infinity, cancel: () => {} }
      for (const entry of lru.values()) purgeBy(entry.storedAt + lifetimeMs(entry))
    },
    stopPurging (): void {
      purging?.cancel()
      purging = undefined
    },
    /**
     * Gives back at least `bytes` if it holds them: the entries past their lifetime, then the
     * least recently used (counted as evictions). The bytes it was counted for.
     */
    giveWay (bytes: number): number {
      const before = lru.calculatedSize
      purge()
      while (before - lru.calculatedSize < bytes && lru.size > 0) lru.pop()
      return before - lru.calculatedSize
    },
    bytes: (): number => lru.calculatedSize,
    /** How many target URIs drop() finds copies under: no more than the copies held, so bounded with them. */
    targets: (): number => byUri.size,
    count: (): number => lru.size,
    /** The copies from the most recently used on, at most `max`. */
    entries: (max = Infinity): Entry[] => {
      const listed: Entry[] = []
      for (const entry of lru.values()) {
        if (listed.length >= max) break
        listed.push(entry)
      }
      return listed
    }
  }
}

export type MemoryStore = ReturnType<typeof createMemoryStore>
