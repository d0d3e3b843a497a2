// The read cache's place in the path (src/cache/ holds the cache): a GET or HEAD of a rule with
// cache= is asked of the cache before the budget and before the token. A stored answer is served
// here; a miss waits for another request's fetch or leads one (cached-request.ts), which goes
// through the budget stage and the upstream stage as any send.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import type { CacheOption, Rule } from '../../config/rate-limit-rules.js'
import { cachedRequest } from '../../cache/cached-request.js'
import type { Entry } from '../../cache/entries.js'
import type { Serve } from '../../cache/fill.js'
import type { Failure } from '../../cache/flights.js'
import { requestCacheable, type StatusParams } from '../../cache/policy.js'
import type { CacheResult } from '../../cache/read-cache.js'
import { InternalError, isOwnError, sendError, UpstreamRateLimitedError } from '../../http/errors.js'
import { sendHeld } from '../../upstream/forward.js'
import { callerGone, forwardedPath } from '../exchange.js'
import type { Path, StageOptions } from '../path.js'

export function createCacheStage (options: StageOptions, path: Path) {
  const { cache, quota, tokens, metrics, fields, upstreamUrl } = options

  function serveCached (reply: FastifyReply, entry: Entry, method: string, params: StatusParams, result: CacheResult): void {
    reply.hijack()
    if (fields === undefined) {
      cache?.serve(reply.raw, entry, method, params, result)
      return
    }
    // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
    const rule = quota.ruleFor(reply.request.method, reply.request.raw.url ?? '/')
    fields.withFields(rule, reply.raw, () => { cache?.serve(reply.raw, entry, method, params, result) })
  }

  function serverFor (request: FastifyRequest, reply: FastifyReply): Serve | undefined {
    return callerGone(request) ? undefined : (entry, params, result) => { serveCached(reply, entry, request.method, params, result) }
  }

  /** A waiter's answer when the fetch it waited for failed: that failure, with the RateLimit fields every answer of its rule carries. */
  function answerFailure (request: FastifyRequest, reply: FastifyReply, failure: Failure): void {
    if (callerGone(request)) return
    // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
    const rule = fields === undefined || !quota.active ? undefined : quota.ruleFor(request.method, request.raw.url ?? '/')
    const withFields = (answer: () => void): void => {
      if (fields === undefined) answer()
      else fields.withFields(rule, reply.raw, () => { if (!callerGone(request)) answer() })
    }
    if ('answer' in failure) {
      reply.hijack()
      withFields(() => { sendHeld(reply.raw, failure.answer) })
      return
    }
    const error = isOwnError(failure.error) ? failure.error as FastifyError : new InternalError()
    const retryAfter = failure.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: failure.retryAfterSeconds }
    // A waiter refused with its fetch's budget refusal reads what any local refusal says.
    if (error instanceof UpstreamRateLimitedError && failure.retryAfterSeconds !== undefined) {
      fields?.refused(rule, reply.raw, failure.retryAfterSeconds * 1000)
      sendError(reply, error, metrics, retryAfter)
      return
    }
    withFields(() => { sendError(reply, error, metrics, retryAfter) })
  }

  const cached = cache === undefined
    ? async () => {}
    : cachedRequest({
      cache,
      quota,
      upstreamUrl,
      actOnVerdict: (request, reply, rule, verdict) => { path.actOnVerdict(request, reply, rule, verdict) },
      serve: serveCached,
      callerGone,
      forwardedPath,
      hasToken: () => tokens.current() !== undefined,
      needToken: async (request) => { request.token = tokens.current() ?? await tokens.get() },
      fail: answerFailure
    })

  return {
    serveCached,
    serverFor,
    answerFailure,

    /** The rule with cache= whose stored answers may serve this GET or HEAD (none: it is sent as any request). */
    cacheRule (request: FastifyRequest): (Rule & { cache: CacheOption }) | undefined {
      if (cache === undefined || request.fill !== null || !requestCacheable(request.method, request.headers)) return undefined
      // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
      const rule = quota.ruleFor(request.method, request.raw.url ?? '/')
      return rule?.cache === undefined ? undefined : rule as Rule & { cache: CacheOption }
    },

    /** Served from the cache, or waiting for a fetch, or fetching through the budget. */
    ask (request: FastifyRequest, reply: FastifyReply, rule: Rule & { cache: CacheOption }): void {
      cached(request, reply, rule).catch((err: unknown) => {
        request.fill?.flight.settle(undefined)
        request.log.error({ err }, 'read cache failed')
        if (!callerGone(request)) sendError(reply, new InternalError(), metrics)
      })
    }
  }
}
