// A key taken by one request, its claim, and what becomes of it as the request goes its way:
// handed to the upstream, answered (TI's answer kept), never sent (the key released), or
// written and left without a complete answer (the key held as outcome unknown).
import { randomUUID } from 'node:crypto'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { Rule } from '../config/rate-limit-rules.js'
import type { Metrics } from '../metrics.js'
import { isRateLimitFault } from '../quota/apigee-fault.js'
import type { KeyStore, StoredAnswer } from './entries.js'

/** TI's answer to a keyed request is held back whole to be kept, up to this; a larger one passes as it comes (its key then held as unknown). */
export const STORED_ANSWER_MAX_BYTES = 1024 * 1024

/**
 * A key taken by one request, and where its request is: `open` (nothing sent, or a 401 TI did
 * not act on), `sending` (handed to the upstream: it may have reached TI), `recording` (TI's
 * whole answer is being kept), `settled` (kept, released or held unknown).
 */
export interface Claim {
  readonly id: string
  readonly rule: Rule
  /** The request's fingerprint, kept with the key's answer (a retry is checked against it). */
  readonly fingerprint: string
  /** Who took the key: this process and this claim; only it settles or releases the key. */
  readonly owner: string
  phase: 'open' | 'sending' | 'recording' | 'settled'
}

export interface ClaimOptions {
  store: KeyStore
  clock: Clock
  metrics: Metrics
  log: Logger
}

export function createClaims ({ store, clock, metrics, log }: ClaimOptions) {
  // Each take is a claim of its own (this process, and a number): a pending key is settled or
  // released only by the request that took it, never by another request of the same process.
  const processId = randomUUID()
  let taken = 0

  /** A pending key another request took, whose sidecar is gone: held as unknown from now on. */
  async function heldUnknown (rule: Rule, id: string, of: string, print: string): Promise<void> {
    const expiresAt = clock.wallNow() + (rule.idempotency?.lifetimeMs ?? 0)
    const held = await store.settle(id, of, { state: 'unknown', fingerprint: print, expiresAt }).catch(() => false)
    if (!held) return
    metrics.idempotencyOutcomesUnknown.inc({ rule: rule.id })
    log.warn({ rule: rule.id }, 'keyed request without a complete answer: its key is held as outcome unknown')
  }

  /** The request was written, or may have been, and no complete answer came. */
  function unknown (claim: Claim): void {
    if (claim.phase !== 'sending') return
    claim.phase = 'settled'
    void keepUnknown(claim)
  }

  async function keepUnknown (claim: Claim): Promise<void> {
    const expiresAt = clock.wallNow() + (claim.rule.idempotency?.lifetimeMs ?? 0)
    const kept = await store.settle(claim.id, claim.owner, { state: 'unknown', fingerprint: claim.fingerprint, expiresAt }).catch(() => false)
    metrics.idempotencyOutcomesUnknown.inc({ rule: claim.rule.id })
    log.warn({ rule: claim.rule.id, kept }, 'keyed request without a complete answer: its key is held as outcome unknown')
  }

  function release (claim: Claim): void {
    if (claim.phase !== 'open' && claim.phase !== 'sending') return
    claim.phase = 'settled'
    void store.release(claim.id, claim.owner).catch((err: unknown) => {
      log.warn({ rule: claim.rule.id, reason: describe(err) }, 'a key of a request never sent could not be released: it is held as unknown once its deadline passes')
    })
  }

  return {
    /** The owner of the key about to be taken: this process and the take's number. */
    nextOwner (): string {
      taken += 1
      return `${processId}:${taken}`
    },
    heldUnknown,
    /**
     * The exchange ended. A key whose request was never sent is free again. One whose answer
     * went out as it came (too large to keep) is held as unknown; one still sending is settled
     * by the upstream's own end (the exchange outlives its caller: src/upstream/forward.ts).
     */
    ended (claim: Claim, finished: boolean): void {
      if (claim.phase === 'open') release(claim)
      else if (finished) unknown(claim)
    },
    /** The request is handed to the upstream: from here it may reach TI. */
    sending (claim: Claim | null): void { if (claim !== null && claim.phase === 'open') claim.phase = 'sending' },
    /** TI answered 401 and the request will be replayed: TI did not act on it. */
    rejected (claim: Claim | null): void { if (claim?.phase === 'sending') claim.phase = 'open' },
    /** Whether this request's key waits for TI's answer. */
    keyed: (claim: Claim | null): boolean => claim?.phase === 'sending',
    /** How much of TI's answer to hold back to keep it (false: not a keyed request). */
    holds: (claim: Claim | null): number | false => claim?.phase === 'sending' ? STORED_ANSWER_MAX_BYTES : false,
    /** TI's complete answer: kept for the key's lifetime, before the caller gets it. */
    async answered (claim: Claim | null, answer: StoredAnswer): Promise<void> {
      if (claim === null || claim.phase !== 'sending') return
      // The gateway's refusals (a token it rejected, its rate limit, also as Apigee's 500 fault,
      // compressed or not): TI never acted on the request.
      if (answer.statusCode === 401 || answer.statusCode === 429 ||
          (answer.statusCode === 500 && isRateLimitFault(answer.body, answer.headers['content-encoding']))) {
        release(claim)
        return
      }
      claim.phase = 'recording'
      const expiresAt = clock.wallNow() + (claim.rule.idempotency?.lifetimeMs ?? 0)
      const done = { state: 'done' as const, fingerprint: claim.fingerprint, answer, expiresAt }
      const kept = await store.settle(claim.id, claim.owner, done).catch((err: unknown) => {
        log.warn({ rule: claim.rule.id, reason: describe(err) }, 'TI\'s answer to a keyed request could not be kept: its key is held as unknown once its deadline passes')
        return false
      })
      claim.phase = 'settled'
      if (!kept) metrics.idempotencyOutcomesUnknown.inc({ rule: claim.rule.id })
    },
    /** Written (or maybe written) and no complete answer: held as unknown. */
    failed (claim: Claim | null): void { if (claim !== null) unknown(claim) },
    /** Nothing of the request reached TI: the key is free again. */
    unsent (claim: Claim | null): void { if (claim !== null) release(claim) }
  }
}

/** An error's message, for a log line's reason. */
export function describe (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
