// What a store keeps for one key, and what a request with that key is told. Pure: no I/O.

/** TI's complete answer to a keyed request, as it is replayed: status, headers, body. */
export interface StoredAnswer {
  readonly statusCode: number
  readonly headers: Readonly<Record<string, string | string[] | undefined>>
  readonly body: Buffer
}

/**
 * One key's record. `pending`: a request with it is on its way (`owner` is the claim that took
 * it, `PROCESS:N`: the sidecar process and its request; only that claim settles or releases it;
 * past `deadline` that process is taken to be gone and the outcome is unknown).
 * `done`: TI's answer is kept. `unknown`: the request was written and no complete answer came.
 * Times are wall-clock unix ms: records outlive a process and are shared by the fleet.
 */
export type Entry =
  | { readonly state: 'pending', readonly fingerprint: string, readonly owner: string, readonly deadline: number, readonly expiresAt: number }
  | { readonly state: 'done', readonly fingerprint: string, readonly answer: StoredAnswer, readonly expiresAt: number }
  | { readonly state: 'unknown', readonly fingerprint: string, readonly expiresAt: number }

export type Pending = Extract<Entry, { state: 'pending' }>
export type Settled = Exclude<Entry, Pending>

/** What taking a key found. */
export type Taken =
  | { readonly kind: 'taken' }
  | { readonly kind: 'held', readonly entry: Entry }
  /** The key cannot be checked (Redis away, its keys lost and not yet recovered, the state file failing). */
  | { readonly kind: 'unavailable', readonly reason: string, readonly retryAfterMs: number }

/** Where keys live: this process (and its state directory), or the fleet's Redis. */
export interface KeyStore {
  readonly backend: 'memory' | 'state-dir' | 'redis'
  /** Takes the key for a new request if nobody holds it (atomically, fleet-wide where shared). */
  take: (id: string, entry: Pending) => Promise<Taken>
  /** A pending key of `owner` (the claim that took it) becomes done or unknown; false when it is not (released, expired, taken over). */
  settle: (id: string, owner: string, next: Settled) => Promise<boolean>
  /** Forgets a key: only a pending one of `owner` (nothing was sent), or any (an operator, owner undefined). */
  release: (id: string, owner?: string) => Promise<boolean>
  /** Keys held by state, as far as this sidecar knows them (counts only: never a key). */
  counts: () => { pending: number, done: number, unknown: number }
  start: () => Promise<void>
  close: () => Promise<void>
}

/** What a request is told about a key someone holds. */
export type Judgement =
  | { readonly kind: 'replay', readonly answer: StoredAnswer }
  | { readonly kind: 'in-flight', readonly retryAfterMs: number }
  | { readonly kind: 'unknown' }
  | { readonly kind: 'mismatch' }

/** The draft's rules (§2.6, §2.7): another body is 422, a request in flight 409, a settled one its answer. */
export function judge (entry: Entry, fingerprint: string, wallNow: number): Judgement {
  if (entry.fingerprint !== fingerprint) return { kind: 'mismatch' }
  if (entry.state === 'done') return { kind: 'replay', answer: entry.answer }
  if (entry.state === 'unknown' || entry.deadline <= wallNow) return { kind: 'unknown' }
  return { kind: 'in-flight', retryAfterMs: entry.deadline - wallNow }
}

/** An entry as one JSON line (the state file) and back; the body as base64. */
export function entryToJson (entry: Entry): unknown {
  if (entry.state !== 'done') return entry
  return { ...entry, answer: { ...entry.answer, body: entry.answer.body.toString('base64') } }
}

export function entryFromJson (value: unknown): Entry | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const v = value as Record<string, unknown>
  if (typeof v.fingerprint !== 'string' || typeof v.expiresAt !== 'number') return undefined
  const base = { fingerprint: v.fingerprint, expiresAt: v.expiresAt }
  if (v.state === 'unknown') return { state: 'unknown', ...base }
  if (v.state === 'pending' && typeof v.owner === 'string' && typeof v.deadline === 'number') {
    return { state: 'pending', ...base, owner: v.owner, deadline: v.deadline }
  }
  const answer = v.answer as { statusCode?: unknown, headers?: unknown, body?: unknown } | undefined
  if (v.state === 'done' && typeof answer?.statusCode === 'number' && typeof answer.body === 'string' &&
      typeof answer.headers === 'object' && answer.headers !== null) {
    return {
      state: 'done',
      ...base,
      answer: { statusCode: answer.statusCode, headers: answer.headers as Record<string, string>, body: Buffer.from(answer.body, 'base64') }
    }
  }
  return undefined
}
