// A stored answer, how it crosses Redis (one buffer: its description, then TI's bytes), and
// the sidecar's own copies: in memory, bounded by bytes, the least recently used evicted first
// (lru-cache). Lifetimes are measured on the monotonic clock; in Redis, on Redis's (the key's
// TTL), so that every sidecar reads the same age whatever its own clock says.
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

type Description = Omit<Entry, 'body' | 'storedAt'>

/** One buffer for Redis: the description's length (4 bytes), the description as JSON, then the body. */
export function encodeEntry (entry: Entry): Buffer {
  const { body, storedAt: _local, ...description } = entry
  const json = Buffer.from(JSON.stringify(description))
  const head = Buffer.alloc(4)
  head.writeUInt32BE(json.length)
  return Buffer.concat([head, json, body])
}

/** An entry read from Redis, with `leftMs` of its key's TTL left: undefined if it is not one of ours. */
export function decodeEntry (buffer: Buffer, leftMs: number, now: number): Entry | undefined {
  let length: number
  let description: Description
  try {
    length = buffer.readUInt32BE(0)
    description = JSON.parse(buffer.subarray(4, 4 + length).toString()) as Description
  } catch {
    return undefined
  }
  if (typeof description.status !== 'number' || typeof description.freshMs !== 'number' ||
    typeof description.staleMs !== 'number' || !Array.isArray(description.vary)) return undefined
  const resident = lifetimeMs(description) - leftMs
  return { ...description, body: buffer.subarray(4 + length), storedAt: now - resident }
}

export interface MemoryStoreOptions {
  clock: Clock
  maxBytes: number
  /** An entry was evicted to make room (not: expired or replaced). */
  onEvict: (entry: Entry) => void
}

/** The sidecar's own copies: at most `maxBytes`, the least recently used evicted first. */
export function createMemoryStore ({ clock, maxBytes, onEvict }: MemoryStoreOptions) {
  const lru = new LRUCache<string, Entry>({
    maxSize: maxBytes,
    sizeCalculation: entrySize,
    dispose: (entry, _key, reason) => { if (reason === 'evict') onEvict(entry) }
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
      return true
    },
    bytes: (): number => lru.calculatedSize,
    entries: (): Entry[] => [...lru.values()]
  }
}

export type MemoryStore = ReturnType<typeof createMemoryStore>
