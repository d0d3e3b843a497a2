// The budget stage: the quota guard asked before each send (one budget point per send: a replay
// after a 401 is a second call the gateway counts). Admitted: on to the upstream stage, with
// the RateLimit fields when they are on. Refused: a local 429 with Retry-After, or a stored
// answer within stale= standing in; a caller gone meanwhile gets its point back.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Rule } from '../../config/rate-limit-rules.js'
import { InternalError, sendError, UpstreamRateLimitedError } from '../../http/errors.js'
import type { Verdict } from '../../quota/guard.js'
import { callerGone } from '../exchange.js'
import type { Path, StageOptions } from '../path.js'

export function createBudgetStage ({ quota, cache, metrics, fields }: StageOptions, path: Path) {
  function actOnVerdict (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, verdict: Verdict): void {
    const fill = request.fill
    if (verdict.ok) {
      if (!callerGone(request) || (fill !== null && request.replayed)) {
        if (fields === undefined) path.forward(request, reply, rule, verdict.ticket)
        else fields.withFields(rule, reply.raw, () => { path.forward(request, reply, rule, verdict.ticket) })
        return
      }
      // Gone after its point was taken and before anything was written: the point goes back
      // (and those waiting for this fetch go on by themselves).
      quota.refund(verdict.ticket)
      path.abandon(request)
      return
    }
    // Left while waiting for its budget: never sent, nothing spent (a waiter leads the next fetch).
    if (verdict.reason === 'gone' || callerGone(request)) {
      path.abandon(request)
      return
    }
    // A stored answer stands in for the refusal while it is within stale=.
    const standing = fill?.found === undefined ? undefined : cache?.standing(fill.found)
    if (fill?.found !== undefined && standing?.usable === true) {
      fill.servedAs = standing.fresh ? 'hit' : 'stale'
      fill.flight.settle(fill.found, true)
      // A fresh one here was asked past (the caller's no-cache): it says the refresh was refused.
      const why = `${standing.fresh ? 'no-refresh' : 'stale'}-${verdict.reason}`
      path.serveCached(reply, fill.found, request.method, { hit: true, detail: why }, standing.fresh ? 'hit' : 'stale')
      return
    }
    const { message, retryAfterSeconds } = quota.describe(verdict)
    fields?.refused(rule, reply.raw, verdict.retryAfterMs)
    request.log.debug({ rule: verdict.scope, reason: verdict.reason, retryAfter: retryAfterSeconds }, 'refused by the quota guard')
    const error = new UpstreamRateLimitedError(message)
    // Those waiting for this fetch are refused with it, at once, not one budget wait each;
    // other sidecars' only when it is the fleet's budget (a degraded one is this sidecar's).
    fill?.flight.fail({ error, retryAfterSeconds, ...(verdict.reason === 'degraded' ? { own: true } : {}) })
    sendError(reply, error, metrics, { retryAfterSeconds })
  }

  return {
    actOnVerdict,

    /** Asks the quota guard for this request's rule, and acts on its verdict (at once, or once it has waited). */
    askQuota (request: FastifyRequest, reply: FastifyReply): void {
      // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
      const rule = quota.ruleFor(request.method, request.raw.url ?? '/')
      const verdict = quota.admit(rule, reply.raw)
      if (!(verdict instanceof Promise)) {
        actOnVerdict(request, reply, rule, verdict)
        return
      }
      verdict.then((v) => { actOnVerdict(request, reply, rule, v) }, (err: unknown) => {
        request.log.error({ err }, 'quota guard failed')
        // Nothing sent: the key is free again, and a fill's waiters go on by themselves.
        path.abandon(request)
        if (!callerGone(request)) sendError(reply, new InternalError(), metrics)
      })
    }
  }
}
