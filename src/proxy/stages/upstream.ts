// The upstream stage: the one send to TI (src/upstream/forward.ts dispatches it) with the
// request's token, and what each feature does with TI's answer as it arrives: the quota guard
// reads it (cool-downs), the cache stores it or lets a stored one stand in, the idempotency key
// keeps it, and a 401 is held back for a replay (replay.ts). Everything else goes to the caller
// byte for byte.
import type { Readable } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Rule } from '../../config/rate-limit-rules.js'
import { fillAnswered, fillFailed, fillHeld, fillHolds } from '../../cache/fill.js'
import { BodyTooLargeError, sendError, UpstreamBusyError, upstreamError } from '../../http/errors.js'
import { upstreamRequestHeaders } from '../../http/rules.js'
import type { Ticket, Verdict } from '../../quota/guard.js'
import { HOLD_BACK_MAX_BYTES, sendHeld } from '../../upstream/forward.js'
import { callerGone, forwardedPath } from '../exchange.js'
import type { Path, StageOptions } from '../path.js'

export function createUpstreamStage (options: StageOptions, path: Path) {
  const { upstreamUrl, tokens, metrics, upstream, quota, cache, idempotency } = options
  const upstreamHost = new URL(upstreamUrl).host

  /** Sends the request upstream with its current token; the answer goes straight to the caller. */
  function forward (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, ticket: Ticket | undefined): void {
    const fill = request.fill
    // A request that waited (for its budget, or another's fetch) goes with the newest token:
    // the one it took may have been rejected meanwhile (none valid now: the one it took).
    request.token = tokens.current() ?? request.token
    const body = request.replayBody ?? (request.body as Readable | undefined) ?? null
    /** The quota guard's refusal as the request was leaving, if it came to that. */
    let refusal: Verdict | undefined
    idempotency?.sending(request.claim)
    // A body on GET or HEAD is consumed, not forwarded (RFC 9110 §9.3.1): nor is its length.
    const headers = upstreamRequestHeaders(
      // Stryker disable next-line StringLiteral: unreachable fallback: the token stage sets a token before any send
      request.raw.rawHeaders, request.headers.connection, upstreamHost, request.token?.authorization ?? '', body !== null)
    upstream.forward({
      // A cache fill is a GET, also for a HEAD (Node sends a HEAD's caller no body).
      method: fill === null ? request.method : 'GET',
      path: forwardedPath(request),
      headers,
      body
    }, reply.raw, {
      answer: (statusCode, answerHeaders) => {
        quota.answered(rule, { statusCode, headers: answerHeaders })
        cache?.invalidate(upstreamUrl, request.method, forwardedPath(request), statusCode, answerHeaders)
        if (fill !== null && cache !== undefined) fillAnswered(cache, fill, statusCode, answerHeaders)
      },
      // Each feature's hold, the widest: a keyed order's 500 is held up to its key's limit, not the 401's.
      holds: (statusCode) => widest(path.holdForReplay(request, statusCode), quota.holds(statusCode),
        fill !== null && cache !== undefined && fillHolds(cache, fill, statusCode), idempotency?.holds(request.claim) ?? false),
      outlivesCaller: fill !== null || idempotency?.keyed(request.claim) === true,
      held: (answer) => {
        // idempotency: a keyed request's second 401 is its answer (the replay is the one resend).
        if (answer.statusCode === 401 && !(request.replayed && request.claim !== null)) {
          idempotency?.rejected(request.claim)
          path.replay(request, reply, answer)
          return
        }
        quota.held(rule, answer)
        // idempotency: TI's answer is kept for the key's retries before the caller gets it.
        if (idempotency?.keyed(request.claim) === true) {
          // Stryker disable next-line OptionalChaining: equivalent: the line above found the stage there
          void idempotency?.answered(request.claim, answer).then(() => { if (!callerGone(request)) { reply.hijack(); sendHeld(reply.raw, answer) } })
          return
        }
        if (fill !== null && cache !== undefined) {
          if (fillHeld(cache, fill, answer, path.serverFor(request, reply))) return
        }
        if (callerGone(request)) return
        // Passed on as it came, byte for byte.
        reply.hijack()
        sendHeld(reply.raw, answer)
      },
      // Nothing of the request reached the upstream: its budget point goes back. Its caller
      // gone, it is abandoned: those waiting for its fetch go on (one leads the next).
      unsent: () => {
        quota.refund(ticket)
        if (callerGone(request)) path.abandon(request)
        else idempotency?.unsent(request.claim)
      },
      // Its send counts from now: it may have waited for a connection since its admission.
      // Or it must not go (the fleet cannot be told it left late): refused as at admission.
      sending: () => {
        refusal = quota.leaving(ticket)
        return refusal === undefined ? undefined : new Error('refused by the quota guard as it was leaving')
      },
      failed: (err) => {
        if (refusal !== undefined) {
          path.actOnVerdict(request, reply, rule, refusal)
          return
        }
        idempotency?.failed(request.claim)
        if (fill !== null && cache !== undefined && fillFailed(cache, fill, path.serverFor(request, reply), { error: upstreamError(err) })) return
        if (callerGone(request)) return
        if (err instanceof UpstreamBusyError) {
          request.log.warn({ queued: upstream.queued() }, 'no upstream connection came free in time')
        } else if (!(err instanceof BodyTooLargeError)) {
          request.log.warn({ code: (err as { code?: string }).code, reason: err.message }, 'upstream request failed')
        }
        sendError(reply, upstreamError(err), metrics)
      },
      // Its caller left and TI's answer, which would have gone to it as it came (not stored), was
      // not read on: TI did not fail. A fill's waiters fetch by themselves (unless told as it began).
      dropped: () => {
        idempotency?.failed(request.claim)
        fill?.flight.settle(undefined)
      },
      // A fill's waiters fetch by themselves: this answer goes to its caller as it comes.
      started: () => {
        reply.hijack()
        fill?.flight.settle(undefined)
      },
      truncated: () => { request.exchange.truncated = true; idempotency?.failed(request.claim) }
    })
  }

  return { forward }
}

/** The widest of the holds asked for (true: HOLD_BACK_MAX_BYTES), or false when none is. */
function widest (...holds: Array<boolean | number>): boolean | number {
  if (holds.every((hold) => hold === false)) return false
  return Math.max(...holds.map((hold) => hold === true ? HOLD_BACK_MAX_BYTES : Number(hold)))
}
