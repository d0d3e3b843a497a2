// The idempotency stage of the request path (draft-ietf-httpapi-idempotency-key-header): on a
// rule with idempotency=, a request's key is taken before its budget or TI are asked; a key
// someone holds is answered here (TI's stored answer, 409, 422) and never sent again. The
// request path tells the stage what became of a taken key's request: sent, answered, not sent, cut.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Readable } from 'node:stream'
import { matchRule, type IdempotencyOption, type Rule } from '../config/rate-limit-rules.js'
import {
  BodyTooLargeError, IdempotencyKeyInUseError, IdempotencyKeyInvalidError, IdempotencyKeyMissingError, IdempotencyKeyReusedError,
  IdempotencyUnavailableError, InternalError, OrderOutcomeUnknownError, sendError
} from '../http/errors.js'
import { retryAfterSeconds } from '../quota/retry-after.js'
import { createClaims, describe, type Claim, type ClaimOptions } from './claims.js'
import { judge, type KeyStore, type StoredAnswer } from './entries.js'
import { bodyKey, fingerprint, headerKey, keyId, type KeyFound } from './key.js'

/** A keyed request's body is read whole (its fingerprint, a replay after 401): up to this. */
export const KEYED_BODY_MAX_BYTES = 64 * 1024
/** The header that marks a replayed answer (Stripe's name, which clients already look for). */
export const REPLAYED_HEADER = 'idempotent-replayed'

export { STORED_ANSWER_MAX_BYTES, type Claim } from './claims.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The key this request took on an idempotent route (src/idempotency/stage.ts); null: none. */
    claim: Claim | null
  }
}

export interface StageOptions extends ClaimOptions {
  rules: readonly Rule[]
  /** How long a request may be on its way: past it, a pending key whose sidecar is gone is held as unknown. */
  pendingMs: number
}

export type KeyedRule = Rule & { readonly idempotency: IdempotencyOption }

export function createIdempotencyStage ({ rules, store, clock, metrics, log, pendingMs }: StageOptions) {
  const claims = createClaims({ store, clock, metrics, log })
  const keyed = rules.some((rule) => rule.idempotency !== undefined)
  metrics.measureUnknownKeys(() => store.counts().unknown)

  function ruleFor (method: string, target: string): KeyedRule | undefined {
    if (!keyed) return undefined
    const rule = matchRule(rules, method, target)
    return rule?.idempotency === undefined ? undefined : rule as KeyedRule
  }

  const count = (rule: Rule, result: string): void => { metrics.idempotencyRequests.inc({ rule: rule.id, result }) }

  function refuse (request: FastifyRequest, reply: FastifyReply, rule: Rule, result: string, error: Parameters<typeof sendError>[1], retryAfterMs?: number): false {
    count(rule, result)
    if (!gone(request)) sendError(reply, error, metrics, retryAfterMs === undefined ? {} : { retryAfterSeconds: retryAfterSeconds(retryAfterMs) })
    return false
  }

  /**
   * Decides a request of an idempotent route: true when it goes on (its key taken, in
   * request.claim, or none given where none is required), false when it was answered here.
   */
  async function decide (request: FastifyRequest, reply: FastifyReply, rule: KeyedRule): Promise<boolean> {
    const option = rule.idempotency
    let body: Buffer | null | undefined
    try {
      body = await wholeBody(request)
    } catch (err) {
      // A chunked body past MAX_BODY_BYTES (counted as it streams): the same 413 as on any route.
      if (err instanceof BodyTooLargeError) return refuse(request, reply, rule, 'invalid', err)
      if (!gone(request)) throw err
      // The caller left mid-upload: no key was taken, nothing is sent.
      log.debug({ rule: rule.id, reason: describe(err) }, 'caller closed the connection before its keyed request was read')
      return false
    }
    if (body === undefined) return refuse(request, reply, rule, 'invalid', new BodyTooLargeError(KEYED_BODY_MAX_BYTES))
    let found: KeyFound = headerKey(request.raw.rawHeaders)
    if ('missing' in found && option.bodyField !== undefined) found = bodyKey(body, option.bodyField)
    if ('problem' in found) return refuse(request, reply, rule, 'invalid', new IdempotencyKeyInvalidError(found.problem))
    if ('missing' in found) {
      if (!option.requireKey) {
        // Sent as any request is: nothing to hold it by.
        request.claim = { id: '', rule, fingerprint: '', owner: '', phase: 'settled' }
        return true
      }
      const where = option.bodyField === undefined ? 'send it in the Idempotency-Key header' : `send it in the Idempotency-Key header or the body field ${option.bodyField}`
      return refuse(request, reply, rule, 'missing', new IdempotencyKeyMissingError(where))
    }
    const id = keyId(rule.id, found.key)
    const print = fingerprint(request.method, request.raw.url ?? '/', body)
    const now = clock.wallNow()
    const owner = claims.nextOwner()
    // Held at least until its deadline: a key must not lapse while its order may be at TI (idempotency=1s).
    const taken = await store.take(id, { state: 'pending', fingerprint: print, owner, deadline: now + pendingMs, expiresAt: now + Math.max(option.lifetimeMs, pendingMs) })
      .catch(() => ({ kind: 'unavailable' as const, reason: 'the key store failed', retryAfterMs: 1000 }))
    if (taken.kind === 'unavailable') return refuse(request, reply, rule, 'unavailable', new IdempotencyUnavailableError(taken.reason), taken.retryAfterMs)
    if (taken.kind === 'taken') {
      const claim: Claim = { id, rule, fingerprint: print, owner, phase: 'open' }
      request.claim = claim
      // Whatever path the request takes, its key is settled when its exchange ends.
      reply.raw.once('close', () => { claims.ended(claim, reply.raw.writableFinished) })
      count(rule, 'sent')
      return true
    }
    const verdict = judge(taken.entry, print, clock.wallNow())
    if (verdict.kind === 'mismatch') return refuse(request, reply, rule, 'mismatch', new IdempotencyKeyReusedError())
    if (verdict.kind === 'in-flight') return refuse(request, reply, rule, 'in_flight', new IdempotencyKeyInUseError(), verdict.retryAfterMs)
    if (verdict.kind === 'unknown') {
      // A pending key whose sidecar is gone (its deadline passed): held as unknown from now on.
      if (taken.entry.state === 'pending') await claims.heldUnknown(rule, id, taken.entry.owner, print)
      return refuse(request, reply, rule, 'unknown', new OrderOutcomeUnknownError())
    }
    count(rule, 'replayed')
    if (!gone(request)) replay(reply, verdict.answer)
    return false
  }

  return {
    ruleFor,
    decide: async (request: FastifyRequest, reply: FastifyReply, rule: KeyedRule): Promise<boolean> =>
      await decide(request, reply, rule).catch((err: unknown) => {
        log.error({ err }, 'idempotency stage failed')
        if (!gone(request)) sendError(reply, new InternalError(), metrics)
        return false
      }),
    sending: claims.sending,
    rejected: claims.rejected,
    keyed: claims.keyed,
    holds: claims.holds,
    answered: claims.answered,
    failed: claims.failed,
    unsent: claims.unsent,
    /** Forgets a key whatever its state (an operator, POST /idempotency/release); false when none was held. */
    async releaseKey (ruleId: string, key: string): Promise<boolean> {
      const released = await store.release(keyId(ruleId, key))
      if (released) metrics.idempotencyReleases.inc()
      return released
    },
    status (): IdempotencyStatus {
      return {
        backend: store.backend,
        rules: rules.flatMap((r) => r.idempotency === undefined
          ? []
          : [{ rule: r.id, lifetimeMs: r.idempotency.lifetimeMs, key: r.idempotency.bodyField === undefined ? 'header' : `header or body:${r.idempotency.bodyField}`, required: r.idempotency.requireKey }]),
        keys: store.counts()
      }
    },
    start: async (): Promise<void> => { await store.start() },
    close: async (): Promise<void> => { await store.close() }
  }
}

export type IdempotencyStage = ReturnType<typeof createIdempotencyStage>

/** What /status shows: the keyed rules and how many keys are held, never a key or a body. */
export interface IdempotencyStatus {
  backend: KeyStore['backend']
  rules: Array<{ rule: string, lifetimeMs: number, key: string, required: boolean }>
  keys: { pending: number, done: number, unknown: number }
}

/**
 * The caller's body, whole (read now if it still streams), null for none; undefined when too
 * large to key. Fails as its stream does: BodyTooLargeError past MAX_BODY_BYTES, a caller's abort.
 */
async function wholeBody (request: FastifyRequest): Promise<Buffer | null | undefined> {
  if (request.replayBody !== null) return request.replayBody
  const stream = request.body as Readable | undefined
  if (stream === undefined) return null
  const chunks: Buffer[] = []
  let bytes = 0
  // Not destroyed when too large: that would cut the caller's connection before its 413. The
  // rest is read and dropped (the body stage bounds that to DISCARD_BODY_MS after the answer).
  for await (const chunk of stream.iterator({ destroyOnReturn: false })) {
    bytes += (chunk as Buffer).length
    if (bytes > KEYED_BODY_MAX_BYTES) {
      stream.resume()
      return undefined
    }
    chunks.push(chunk as Buffer)
  }
  request.replayBody = Buffer.concat(chunks)
  return request.replayBody
}

/** TI's stored answer, byte for byte, marked as a replay. */
function replay (reply: FastifyReply, answer: StoredAnswer): void {
  reply.hijack()
  const res = reply.raw
  res.writeHead(answer.statusCode, { ...answer.headers, [REPLAYED_HEADER]: 'true', 'cache-status': 'store-auth-proxy; hit; detail=idempotent-replay' })
  res.end(answer.body)
}

function gone (request: FastifyRequest): boolean {
  return request.raw.socket?.destroyed === true || request.exchange?.gone === true
}
