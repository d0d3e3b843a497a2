// Keys in this process, and in the state directory when one is set ($STATE_DIR/idempotency/):
// every change is appended to a journal and flushed to disk before it counts, so a key taken
// before a request went out is still held after a crash or a restart. A key that was pending
// when its process ended is held as unknown: its request may have reached TI.
import { mkdir, open, readFile, rename, type FileHandle } from 'node:fs/promises'
import { join } from 'node:path'
import type { Clock } from '../clock.js'
import { entryFromJson, entryToJson, type Entry, type KeyStore, type Pending, type Settled, type Taken } from './entries.js'

export const JOURNAL_FILE = 'keys.jsonl'
/** Expired keys are swept at most this often. */
export const SWEEP_MS = 60_000

export interface MemoryStoreOptions {
  clock: Clock
  /** `$STATE_DIR/idempotency`: the journal lives there; undefined keeps keys in memory only. */
  dir?: string
}

export type MemoryStore = KeyStore & {
  entries: () => ReadonlyMap<string, Entry>
  /** Holds a key as another store decided it (the mirror of the fleet's Redis), journaled. */
  put: (id: string, entry: Entry) => Promise<void>
}

export function createMemoryStore ({ clock, dir }: MemoryStoreOptions): MemoryStore {
  const entries = new Map<string, Entry>()
  let journal: FileHandle | undefined
  let lines = 0
  let writing: Promise<void> = Promise.resolve()
  let sweptAt = 0

  /** Appends changes and flushes them to disk; one write at a time, in order. */
  function persist (records: ReadonlyArray<{ id: string, entry: Entry | null }>): Promise<void> {
    const file = journal
    if (file === undefined) return Promise.resolve()
    const text = records.map(({ id, entry }) => JSON.stringify({ id, entry: entry === null ? null : entryToJson(entry) }) + '\n').join('')
    lines += records.length
    writing = writing.catch(() => {}).then(async () => {
      await file.appendFile(text)
      await file.datasync()
    })
    return writing
  }

  function live (id: string): Entry | undefined {
    const entry = entries.get(id)
    if (entry !== undefined && entry.expiresAt <= clock.wallNow()) {
      entries.delete(id)
      return undefined
    }
    return entry
  }

  function sweep (): void {
    const now = clock.wallNow()
    if (now - sweptAt < SWEEP_MS) return
    sweptAt = now
    for (const [id, entry] of entries) if (entry.expiresAt <= now) entries.delete(id)
  }

  /** Rewrites the journal with the live keys only (at start, and when it holds mostly dead lines). */
  async function compact (path: string): Promise<void> {
    const text = [...entries].map(([id, entry]) => JSON.stringify({ id, entry: entryToJson(entry) }) + '\n').join('')
    const next = await open(`${path}.next`, 'w', 0o600)
    await next.writeFile(text)
    await next.datasync()
    await next.close()
    await rename(`${path}.next`, path)
    lines = entries.size
  }

  async function load (path: string): Promise<void> {
    let text = ''
    try {
      text = await readFile(path, 'utf8')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
    const now = clock.wallNow()
    for (const line of text.split('\n')) {
      if (line === '') continue
      let record: { id?: unknown, entry?: unknown }
      try {
        record = JSON.parse(line) as { id?: unknown, entry?: unknown }
      } catch {
        // A line cut by a crash mid-write is the last one: what it said never counted.
        continue
      }
      if (typeof record.id !== 'string') continue
      const entry = record.entry === null ? undefined : entryFromJson(record.entry)
      if (entry === undefined) entries.delete(record.id)
      else entries.set(record.id, entry)
    }
    for (const [id, entry] of entries) {
      if (entry.expiresAt <= now) entries.delete(id)
      // Its process ended while the request was out: it may have been placed.
      else if (entry.state === 'pending') entries.set(id, { state: 'unknown', fingerprint: entry.fingerprint, expiresAt: entry.expiresAt })
    }
  }

  return {
    backend: dir === undefined ? 'memory' : 'state-dir',
    entries: () => entries,
    async put (id: string, entry: Entry): Promise<void> {
      sweep()
      entries.set(id, entry)
      await persist([{ id, entry }])
    },
    async take (id: string, entry: Pending): Promise<Taken> {
      sweep()
      const held = live(id)
      if (held !== undefined) return { kind: 'held', entry: held }
      entries.set(id, entry)
      try {
        await persist([{ id, entry }])
      } catch {
        entries.delete(id)
        return { kind: 'unavailable', reason: 'the state directory cannot be written', retryAfterMs: 1000 }
      }
      return { kind: 'taken' }
    },
    async settle (id: string, owner: string, next: Settled): Promise<boolean> {
      const held = live(id)
      if (held?.state !== 'pending' || held.owner !== owner) return false
      entries.set(id, next)
      await persist([{ id, entry: next }]).catch(() => {})
      return true
    },
    async release (id: string, owner?: string): Promise<boolean> {
      const held = live(id)
      if (held === undefined || (owner !== undefined && (held.state !== 'pending' || held.owner !== owner))) return false
      entries.delete(id)
      await persist([{ id, entry: null }]).catch(() => {})
      return true
    },
    counts () {
      const counts = { pending: 0, done: 0, unknown: 0 }
      for (const entry of entries.values()) counts[entry.state] += 1
      return counts
    },
    async start (): Promise<void> {
      if (dir === undefined) return
      await mkdir(dir, { recursive: true, mode: 0o700 })
      const path = join(dir, JOURNAL_FILE)
      await load(path)
      await compact(path)
      journal = await open(path, 'a', 0o600)
    },
    async close (): Promise<void> {
      await writing.catch(() => {})
      const file = journal
      journal = undefined
      if (file === undefined) return
      // A journal mostly of dead lines is rewritten before the next start reads it.
      await file.close()
      if (dir !== undefined && lines > 2 * entries.size + 1000) await compact(join(dir, JOURNAL_FILE)).catch(() => {})
    }
  }
}
