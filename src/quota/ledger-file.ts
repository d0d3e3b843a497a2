// The ledger on disk (STATE_DIR): what this sidecar sent survives a restart of its container
// (the chart's emptyDir outlives it), so a crash-looping sidecar never starts a fresh budget,
// and one restarted while cut off from Redis tells Redis its earlier sends, under the same
// member id, before it shares again. One small JSON file, replaced atomically — written to a
// temporary file, fsync'd, renamed over the old one, the directory fsync'd — and a send goes
// out only once the file that records it is written (docs/quota-guard.md, "Restarts").
import { readFileSync } from 'node:fs'
import { mkdir, open, rename } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Logger } from 'pino'
import type { Clock, SinceBoot } from '../clock.js'
import type { Limit, Rule } from '../config/rate-limit-rules.js'
import type { Ledger } from './ledger.js'
import { newMemberId, type Store, type Take } from './store.js'

/** Under STATE_DIR: each user of the directory keeps to a subdirectory of its own. */
export const LEDGER_PATH = join('quota', 'ledger.json')
const FORMAT = 1
/**
 * Set by this version's writer only: its run sent nothing alone that the file does not hold
 * (persistingStore). The earlier version's run sent on when a write failed: its file is read,
 * its sends counted, but it vouches for nothing (`vouchesFor`).
 */
const ALONE_RECORDED = 'aloneRecorded'
/**
 * The node's monotonic clock at the write (Clock.sinceBoot), beside the wall clock's: a wall
 * clock stepped forward before the next run would make every send look older than it is.
 */
const WRITTEN = 'written'
type Written = SinceBoot & { wall: number }

/** A send as stored: `at` in wall-clock ms (a monotonic reading means nothing to the next process). */
export interface StoredSend { scope: string, limit: string, id: string, at: number }

export type LoadedLedger =
  /** The earlier run's member id and open sends; `aloneRecorded`: see ALONE_RECORDED. */
  | { state: 'loaded', member: string, sends: StoredSend[], aloneRecorded: boolean, written?: Written }
  /** No file: the first start with this directory (a new pod, a new emptyDir). */
  | { state: 'missing' }
  /** Unreadable, not JSON, or not this format: the earlier run's sends are unknown. */
  | { state: 'corrupt', reason: string }

const isWritten = (w: unknown): w is Written => typeof w === 'object' && w !== null &&
  typeof (w as Written).boot === 'string' && Number.isFinite((w as Written).ms) && Number.isFinite((w as Written).wall)
const isSend = (s: unknown): s is StoredSend => typeof s === 'object' && s !== null &&
  typeof (s as StoredSend).scope === 'string' && typeof (s as StoredSend).limit === 'string' &&
  typeof (s as StoredSend).id === 'string' && Number.isFinite((s as StoredSend).at)

/** Reads the file at start (synchronously: nothing is admitted before it is known). */
export function readLedgerFile (dir: string): LoadedLedger {
  let text: string
  try {
    text = readFileSync(join(dir, LEDGER_PATH), 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'missing' }
    return { state: 'corrupt', reason: `unreadable (${(err as NodeJS.ErrnoException).code ?? 'error'})` }
  }
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch {
    return { state: 'corrupt', reason: 'not JSON' }
  }
  const { version, member, sends, [ALONE_RECORDED]: aloneRecorded, [WRITTEN]: written } = (doc ?? {}) as Record<string, unknown>
  if (version !== FORMAT || typeof member !== 'string' || !Array.isArray(sends) || !sends.every(isSend)) {
    return { state: 'corrupt', reason: `not a format ${FORMAT} ledger` }
  }
  return { state: 'loaded', member, sends, aloneRecorded: aloneRecorded === true, ...(isWritten(written) ? { written } : {}) }
}

/**
 * The file's monotonic reading, if written on this boot's clock (undefined: another, or unknown).
 * A reading behind the file's cannot count from the same origin, whatever the key says.
 */
function sameBoot (loaded: LoadedLedger, clock: Clock): { written: Written, ms: number } | undefined {
  const written = loaded.state === 'loaded' ? loaded.written : undefined
  const here = clock.sinceBoot?.()
  return written !== undefined && here !== undefined && here.boot === written.boot && here.ms >= written.ms ? { written, ms: here.ms } : undefined
}

/**
 * Puts what the file says into the ledger, on this process's monotonic clock. A send's age is
 * its wall-clock age, or on the same boot the smaller of that and its monotonic age (a wall
 * clock stepped either way: the younger counts longer). A send of a rule or limit no longer
 * configured is dropped; one dated in the future (not left when written, or a wall clock
 * stepped back) counts from now: the run that could send it is gone.
 * A corrupt file is the worst case: every limit is taken as spent as far as this sidecar could
 * spend it alone (`capacity`), from now, for its window.
 */
export function restoreLedger (ledger: Ledger, loaded: LoadedLedger, rules: readonly Rule[], clock: Clock, capacity: (limit: Limit) => number): number {
  const now = clock.now()
  const wall = clock.wallNow()
  const boot = sameBoot(loaded, clock)
  let restored = 0
  if (loaded.state === 'loaded') {
    for (const send of loaded.sends) {
      const limit = rules.find((r) => r.id === send.scope)?.limits.find((l) => l.text === send.limit)
      if (limit === undefined) continue
      const age = boot === undefined ? wall - send.at : Math.min(wall - send.at, boot.ms - boot.written.ms - (send.at - boot.written.wall))
      ledger.restore(send.scope, limit, send.id, now - Math.max(0, age))
      restored++
    }
  } else if (loaded.state === 'corrupt') {
    const prefix = `held-${newMemberId()}`
    for (const rule of rules) {
      for (const limit of rule.limits) {
        for (let k = 0; k < capacity(limit); k++) ledger.restore(rule.id, limit, `${prefix}:${limit.text}:${k}`, now)
        restored += capacity(limit)
      }
    }
  }
  return restored
}

/**
 * Whether the file read vouches for the earlier runs: it holds every send they made alone, so
 * their lapse in Redis may end when it is told (redis-scripts.ts, endsWithRun). Written by this
 * version on this boot (its sends' ages known by the monotonic clock too), and every send of it
 * restored: none is of a rule or limit no longer configured.
 */
export function vouchesFor (loaded: LoadedLedger, restored: number, clock: Clock): boolean {
  return loaded.state === 'loaded' && loaded.aloneRecorded && sameBoot(loaded, clock) !== undefined && restored === loaded.sends.length
}

/**
 * Writes the ledger's open sends, one write at a time: a save asked while one is under way
 * joins the next, which reads the ledger when it starts, so it holds every send recorded before.
 */
export function createLedgerWriter (dir: string, member: string, ledger: Ledger, clock: Clock) {
  const path = join(dir, LEDGER_PATH)
  const temporary = `${path}.tmp`
  // A directory that cannot be made fails the first write, which says why.
  let writing: Promise<unknown> = mkdir(dirname(path), { recursive: true }).catch(() => {})
  let next: Promise<void> | undefined

  async function write (): Promise<void> {
    const wall = clock.wallNow()
    const boot = clock.sinceBoot?.()
    // One not left yet is stored at the latest it may leave: it counts from its departure, and
    // nothing may write the file between that and a crash.
    const sends: StoredSend[] = ledger.open().map((s) => ({ scope: s.scope, limit: s.limit.text, id: s.id, at: wall + (s.leavesWithinMs ?? -s.ageMs) }))
    const file = await open(temporary, 'w', 0o600)
    try {
      await file.writeFile(JSON.stringify({ version: FORMAT, member, sends, [ALONE_RECORDED]: true, ...(boot === undefined ? {} : { [WRITTEN]: { ...boot, wall } }) }))
      await file.sync()
    } finally {
      await file.close()
    }
    await rename(temporary, path)
    // The rename itself is durable only once the directory is.
    const directory = await open(dirname(path), 'r')
    try {
      await directory.sync()
    } finally {
      await directory.close()
    }
  }

  return {
    save (): Promise<void> {
      next ??= writing.catch(() => {}).then(async () => {
        next = undefined
        writing = write()
        await writing
      })
      return next
    }
  }
}

/** Retry-After of a send decided alone and refused because the file could not record it. */
const UNRECORDED_RETRY_MS = 1_000

/**
 * The store whose admitted sends go out only once the file records them. A write that fails
 * (a full or read-only disk) is logged, once per change, and the send goes out: the file is
 * insurance against restarts, and refusing every budgeted call for it would be an outage of
 * its own (the budget in memory, and Redis's, still hold). But for a send decided alone (cut
 * off from Redis): only the file holds it, and a restart's lapse in Redis ends when the file
 * is told (redis-scripts.ts, endsWithRun), so it is given back and refused.
 */
export function persistingStore (store: Store, save: () => Promise<void>, log: Logger): Store & { failing: () => string | undefined } {
  /** Why the last write failed (an errno code, never the file's content); undefined once one succeeds. */
  let failing: string | undefined
  async function recorded (scope: string, limits: readonly Limit[], take: Extract<Take, { kind: 'ok' }>): Promise<Take> {
    try {
      await save()
      if (failing !== undefined) log.info('rate-limit ledger written to STATE_DIR again')
      failing = undefined
    } catch (err) {
      const reason = (err as NodeJS.ErrnoException).code ?? String(err)
      if (reason !== failing) log.error({ reason }, 'rate-limit ledger cannot be written to STATE_DIR: shared sends go on (a restart would forget them), sends decided alone are refused')
      failing = reason
      if (take.alone === true) {
        store.refund(scope, limits, take.id)
        return { kind: 'degraded', ms: UNRECORDED_RETRY_MS, unrecorded: true }
      }
    }
    return take
  }
  const after = (scope: string, limits: readonly Limit[], take: Take): Take | Promise<Take> => take.kind === 'ok' && take.id !== '' ? recorded(scope, limits, take) : take
  return {
    take (scope, limits) {
      const take = store.take(scope, limits)
      return take instanceof Promise ? take.then((t) => after(scope, limits, t)) : after(scope, limits, take)
    },
    refund: (scope, limits, id) => { store.refund(scope, limits, id) },
    // No wait before the send: its time is in the next write (until then the file has it at the
    // latest it could leave: a restart meanwhile counts it from then, or from the restart).
    leaving: (scope, limits, id) => store.leaving(scope, limits, id),
    coolDown: (scope, request) => store.coolDown(scope, request),
    failing: () => failing
  }
}
