// A request of a rule with cache=, from its arrival to an answer: served from the cache, or
// waiting for another request's fetch (here or in the fleet), or fetching for everyone who
// asks meanwhile — through the quota guard, as any send. What happens to TI's answer is fill.ts's.
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { QuotaGuard, Verdict } from '../quota/guard.js'
import type { CacheOption, Rule } from '../config/rate-limit-rules.js'
import type { Entry } from './entries.js'
import { fillFailed, leadFill, type Fill, type Serve } from './fill.js'
import type { Failure } from './flights.js'
import { asksForFresh, asksForItsOwn, cacheKey, varyMatches, type StatusParams } from './policy.js'
import type { CacheResult, ReadCache } from './read-cache.js'

export interface CachedRequestOptions {
  cache: ReadCache
  quota: QuotaGuard
  /** UPSTREAM_URL: part of every key. */
  upstreamUrl: string
  /** The request path's next step with the guard's verdict: forward, or refuse (or a stored answer stands in). */
  actOnVerdict: (request: FastifyRequest, reply: FastifyReply, rule: Rule, verdict: Verdict) => void
  /** Answers the caller from a stored answer. */
  serve: (reply: FastifyReply, entry: Entry, method: string, params: StatusParams, result: CacheResult) => void
  callerGone: (request: FastifyRequest) => boolean
  /** The path and query as they go upstream. */
  forwardedPath: (request: FastifyRequest) => string
  /** Whether a token is at hand now (no waiting). */
  hasToken: () => boolean
  /** Gets the request its token (waiting for one in flight, within TOKEN_WAIT_MS); rejects with the reason none came. */
  needToken: (request: FastifyRequest) => Promise<void>
  /** Answers the caller with a failed fetch's failure. */
  fail: (request: FastifyRequest, reply: FastifyReply, failure: Failure) => void
}

export function cachedRequest (options: CachedRequestOptions) {
  const { cache, quota, upstreamUrl, actOnVerdict, serve, callerGone, forwardedPath, hasToken, needToken, fail } = options
  /**
   * A GET or HEAD of a rule with cache=: a fresh stored answer is served without asking any
   * budget. Otherwise one request fetches for every request that asks meanwhile (they wait for
   * it; a HEAD is fetched as a GET, so its answer serves both), through the budget as any
   * request; a stored answer within stale= stands in when the budget refuses or TI fails.
   */
  return async function cached (request: FastifyRequest, reply: FastifyReply, rule: Rule & { cache: CacheOption }): Promise<void> {
    const path = forwardedPath(request)
    const key = cacheKey(upstreamUrl, path, request.headers)
    const fresh = asksForFresh(request.headers)
    const { entry: found, unusable = false } = await cache.find(key, request.headers)
    if (callerGone(request)) return
    if (found !== undefined && !fresh && cache.standing(found).fresh) {
      cache.counted(rule.id, 'hit')
      serve(reply, found, request.method, { hit: true }, 'hit')
      return
    }
    // Another request here fetches it: wait for its answer. One that ends with nothing for this
    // request lets it try again.
    for (;;) {
      const other = cache.join(key.id, reply.raw)
      if (other === undefined) break
      const outcome = await other
      if (outcome === 'gone' || callerGone(request)) return
      // The fetch was another caller's: its answer is this one's only if TI's Vary agrees.
      const { entry, standsIn, failure } = outcome
      if (entry !== undefined && varyMatches(entry.vary, request.headers)) {
        const result = standsIn ? 'stale' : 'coalesced'
        cache.counted(rule.id, result)
        serve(reply, entry, request.method, { hit: true, detail: standsIn ? 'stale-error' : 'coalesced' }, result)
        return
      }
      // Its failure is this request's too: all waiters are answered within one fetch's time.
      if (failure !== undefined) {
        cache.counted(rule.id, 'miss')
        fail(request, reply, failure)
        return
      }
    }
    const fill = leadFill(cache, {
      key,
      rule,
      path,
      requestHeaders: request.headers,
      method: request.method,
      found,
      ownAnswer: asksForItsOwn(request.headers),
      fwd: found === undefined ? 'miss' : fresh ? 'request' : 'stale'
    })
    if (fill === undefined) throw new Error('a flight started while none was under way')
    request.fill = fill
    if (servedWithoutToken(request, reply, fill) || !await fleetTurn(request, reply, fill, unusable) || !await tokenFor(request, reply, fill)) return
    // With a stored answer to stand in, a spent budget is not waited for.
    actOnVerdict(request, reply, rule, await quota.admit(rule, reply.raw, { wait: found === undefined }))
  }

  /**
   * The token is asked only for a fetch: a stored answer within stale= is
   * served at once while none is at hand, never waiting for one. True when it was served.
   */
  function servedWithoutToken (request: FastifyRequest, reply: FastifyReply, fill: Fill): boolean {
    const { found } = fill
    const standing = found === undefined ? undefined : cache.standing(found)
    if (found === undefined || standing?.usable !== true || hasToken()) return false
    fill.servedAs = standing.fresh ? 'hit' : 'stale'
    fill.flight.settle(found, true)
    const detail = `${standing.fresh ? 'no-refresh' : 'stale'}-token`
    if (!callerGone(request)) serve(reply, found, request.method, { hit: true, detail }, standing.fresh ? 'hit' : 'stale')
    return true
  }

  /**
   * The fleet is asked before this sidecar fetches (fleet-fetch.ts): true when this request
   * fetches for it; false when another sidecar's fetch answered it (its entry, or its failure,
   * for which a stored answer within stale= stands in), or its caller left.
   */
  async function fleetTurn (request: FastifyRequest, reply: FastifyReply, fill: Fill, unusable: boolean): Promise<boolean> {
    const turn = await cache.turn(fill.key, request.headers, fill.found, reply.raw, unusable)
    if (turn.kind === 'fetch') return true
    if (turn.kind === 'gone') {
      fill.flight.settle(undefined)
      return false
    }
    const to: Serve | undefined = callerGone(request) ? undefined : (entry, params, result) => { serve(reply, entry, request.method, params, result) }
    if (turn.kind === 'entry') {
      fill.servedAs = 'coalesced'
      fill.flight.settle(turn.entry)
      to?.(turn.entry, { hit: true, detail: 'coalesced' }, 'coalesced')
      return false
    }
    if (fillFailed(cache, fill, to, turn.failure)) return false
    fail(request, reply, turn.failure)
    return false
  }

  /**
   * The token for the fetch this request leads; its failure answers everyone waiting (nothing
   * stored stands in: one would have been served without it). False when the request was
   * answered (or its caller left) without a fetch.
   */
  async function tokenFor (request: FastifyRequest, reply: FastifyReply, fill: Fill): Promise<boolean> {
    try {
      await needToken(request)
    } catch (err) {
      const failure: Failure = { error: err as Error }
      fill.flight.fail(failure)
      fail(request, reply, failure)
      return false
    }
    if (!callerGone(request)) return true
    // Left while its token was awaited: nothing is sent for it; a waiter leads the next fetch.
    fill.flight.settle(undefined)
    return false
  }
}
