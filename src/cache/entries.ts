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

/** The bytes an entry takes, near enough: its body, its headers, its path and rule, its Vary digests. */
export function entrySize (entry: Entry): number {
  let size = entry.body.length + 256 + entry.display.length + entry.rule.length
  for (const [name, value] of Object.entries(entry.headers)) size += name.length + String(value).length
  for (const [name, digest] of entry.vary) size += name.length + digest.length + 16
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
  return { ...entry, body, storedAt: now - Math.max(0, redisNowMs - storedAtMs) }
}

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
    bytes: (): number => lru.calculatedSize,
    /** How many target URIs drop() finds copies under: no more than the copies held, so bounded with them. */
    targets: (): number => byUri.size,
    entries: (): Entry[] => [...lru.values()]
  }
}

export type MemoryStore = ReturnType<typeof createMemoryStore>
