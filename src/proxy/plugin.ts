import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import { Transform } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import httpProxy from '@fastify/http-proxy'
import {
  BadRequestError, BodyTooLargeError, InternalError, isOwnError, MethodNotAllowedError, sendError, UpstreamBusyError,
  upstreamError, UpstreamRateLimitedError
} from '../errors.js'
import { sendHeld, type HeldAnswer, type Upstream } from '../upstream/forward.js'
import { FORWARDED_METHODS, requestHeadersProblem, requestTargetProblem, upstreamRequestHeaders } from '../http/rules.js'
import { methodLabel, statusClass, type Metrics, type Outcome } from '../metrics.js'
import type { QuotaGuard, Ticket, Verdict } from '../quota/guard.js'
import type { CacheOption, Rule } from '../config/rate-limit-rules.js'
import type { Entry } from '../cache/entries.js'
import { fillAnswered, fillFailed, fillHeld, fillHolds, type Fill, type Serve } from '../cache/fill.js'
import type { Failure } from '../cache/flights.js'
import { cachedRequest } from '../cache/cached-request.js'
import { requestCacheable, type StatusParams } from '../cache/policy.js'
import type { CacheResult, ReadCache } from '../cache/read-cache.js'
import type { Token, TokenManager } from '../token/token-manager.js'
import type { IdempotencyStage } from '../idempotency/stage.js'
import { createRateLimitFields } from '../quota/rate-limit-fields.js'
import type { RequestTracing } from '../tracing/request.js'

/** What the sidecar knows about one caller's exchange, from arrival to the close of its answer. */
export interface Exchange {
  /** The caller's connection closed before its answer ended. */
  gone: boolean
  /** The upstream failed mid-answer and the caller's connection was cut. */
  truncated: boolean
  /** Bytes of REPLAY_BUFFER_TOTAL_BYTES this request holds. */
  reservedBytes: number
}

declare module 'fastify' {
  interface FastifyRequest {
    exchange: Exchange
    /** The token this request is forwarded with; set by the preHandler before any forwarding. */
    token: Token | null
    /** A small body kept whole, so the request can be replayed once after a 401. */
    replayBody: Buffer | null
    /** The upstream path http-proxy resolved, for the replay. */
    upstreamPath: string | null
    /** Whether this request was already replayed with a fresh token. */
    replayed: boolean
    /** A GET of a rule with cache= that goes upstream: what it may store, and who waits for it. */
    fill: Fill | null
  }
}

/**
 * Bodies up to this size are read whole before forwarding so that a request
 * rejected with 401 (a token revoked early) can be replayed once with a new token.
 * Larger bodies stream through and a 401 goes back to the caller.
 */
export const REPLAY_BODY_MAX_BYTES = 64 * 1024
/**
 * At most this much is held for replays at once, whatever the number of callers:
 * beyond it, small bodies stream like large ones (bounding the memory a burst of
 * uploads can take; the Helm chart's memory limit relies on it).
 */
export const REPLAY_BUFFER_TOTAL_BYTES = 8 * 1024 * 1024
/**
 * After the answer to a request whose body is still arriving (an upstream that
 * answered early, e.g. its own 413), the rest of the body is read and discarded for
 * at most this long, so the caller can read the answer, then the connection is closed.
 */
export const DISCARD_BODY_MS = 2_000
const FORWARDED = new Set<string>(FORWARDED_METHODS)

export interface ProxyOptions {
  upstreamUrl: string
  tokens: TokenManager
  metrics: Metrics
  /** The upstream pool, owned by the caller (TLS verification, timeouts and the queue bound are set there). */
  upstream: Upstream
  accessLog: boolean
  /** 0 for no limit. */
  maxBodyBytes: number
  /** Budgets and cool-downs (src/quota/guard.ts). */
  quota: QuotaGuard
  /** Reuses TI's answers to GETs of rules with cache= (src/cache/); absent when no rule has it. */
  cache?: ReadCache
  /** One send per key on rules with idempotency= (src/idempotency/); absent when no rule has it. */
  idempotency?: IdempotencyStage
  /** RATE_LIMIT_HEADERS: RateLimit-Policy and RateLimit on every answer of a budgeted rule (src/quota/rate-limit-fields.ts). */
  rateLimitHeaders?: boolean
  /** With tracing on: the token waits as spans (src/tracing/request.ts; the rest is wrapped in app.ts). */
  tracing?: Pick<RequestTracing, 'tokenWait'>
}

/**
 * Counts and logs one exchange when its answer closes, finished or not: the status
 * line actually sent (none when the caller got none) and how the exchange ended.
 * Used by the proxy scope's onRequest hook and for the answers Fastify makes
 * before any route runs (bad URL, CONNECT).
 */
export function observeExchange (
  request: FastifyRequest, res: ServerResponse, metrics: Metrics, accessLog: boolean, release: (exchange: Exchange) => void = () => {}
): Exchange {
  const exchange: Exchange = { gone: false, truncated: false, reservedBytes: 0 }
  const started = performance.now()
  metrics.requestsInFlight.inc()
  res.once('close', () => {
    metrics.requestsInFlight.dec()
    const durationMs = performance.now() - started
    const status = res.headersSent ? res.statusCode : undefined
    const outcome: Outcome = res.writableFinished ? 'completed' : exchange.truncated ? 'truncated' : 'aborted'
    if (outcome !== 'completed') exchange.gone = true
    release(exchange)
    metrics.recordExchange(methodLabel(request.method), statusClass(status), outcome, durationMs / 1000)
    if (accessLog) {
      request.log.info({
        method: request.method,
        url: request.url,
        statusCode: status ?? null,
        outcome,
        durationMs: Math.round(durationMs * 10) / 10
      }, 'request')
    }
  })
  return exchange
}

async function proxy (app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { upstreamUrl, tokens, metrics, upstream, accessLog, maxBodyBytes, quota, cache, idempotency } = options
  // RateLimit fields: on admission, a stored answer and a local refusal (src/quota/rate-limit-fields.ts).
  const fields = options.rateLimitHeaders === true ? createRateLimitFields((rule) => quota.budget(rule)) : undefined
  let replayBytes = 0
  const release = (exchange: Exchange): void => {
    replayBytes -= exchange.reservedBytes
    exchange.reservedBytes = 0
  }

  // Stryker disable next-line CallExpression,StringLiteral: equivalent: only declares the property; onRequest sets it on every request before anything reads it
  app.decorateRequest('exchange', null as unknown as Exchange)
  // Stryker disable next-line StringLiteral: equivalent: the preHandler sets the token before any forwarding, the only place it is read
  app.decorateRequest('token', null)
  app.decorateRequest('replayBody', null)
  // Stryker disable next-line StringLiteral: equivalent: http-proxy's handler sets it before any forwarding, the only place it is read
  app.decorateRequest('upstreamPath', null)
  // Stryker disable next-line StringLiteral: equivalent: undefined reads as false, like the default
  app.decorateRequest('replayed', false)
  app.decorateRequest('fill', null)
  app.decorateRequest('claim', null)
  app.setErrorHandler(errorHandler)
  app.setNotFoundHandler((request, reply) => {
    sendError(reply, new MethodNotAllowedError(request.method), metrics)
  })
  // The proxy never parses, decodes or re-encodes a body, whatever its type: every
  // body reaches the preHandler as the caller's byte stream (MAX_BODY_BYTES is the
  // only limit). http-proxy's own parsers cover only JSON and the catch-all; Fastify's
  // text/plain one would remain, with its 1 MiB limit and its UTF-8 decoding.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })

  app.addHook('onRequest', function observe (request, reply, done) {
    request.exchange = observeExchange(request, reply.raw, metrics, accessLog, release)
    // Refused before anything is read: TRACE (the upstream would echo the token back),
    // and every method outside the forwarded set, whatever Fastify thinks of it (QUERY).
    if (!FORWARDED.has(request.method)) {
      done(new MethodNotAllowedError(request.method))
      return
    }
    const problem = requestTargetProblem(request.url) ?? requestHeadersProblem(request.raw.rawHeaders)
    if (problem !== undefined) {
      done(new BadRequestError(problem))
      return
    }
    // Fastify checks a Content-Type's syntax before any parser runs (415 for `foo`); the
    // type is the upstream's business. It is still forwarded: headers go from rawHeaders.
    delete request.raw.headers['content-type']
    done()
  })

  /** preHandler: check the body size, keep a small body for a replay, and get the token. */
  function prepare (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    const body = request.body as Readable | undefined
    if (body === undefined) {
      acquireToken(request, done)
      return
    }
    discardAfterAnswer(request.raw, reply)
    const length = contentLength(request)
    if (maxBodyBytes > 0 && length !== undefined && length > maxBodyBytes) {
      done(new BodyTooLargeError(maxBodyBytes))
      return
    }
    if (length !== undefined && length <= REPLAY_BODY_MAX_BYTES && replayBytes + length <= REPLAY_BUFFER_TOTAL_BYTES) {
      replayBytes += length
      request.exchange.reservedBytes = length
      readWhole(body).then((buffer) => {
        request.replayBody = buffer
        acquireToken(request, done)
      }, done)
      return
    }
    // A chunked body has no length to check up front: count it as it streams.
    if (maxBodyBytes > 0 && length === undefined) request.body = limitBytes(body, maxBodyBytes)
    acquireToken(request, done)
  }

  function acquireToken (request: FastifyRequest, done: HookHandlerDoneFunction): void {
    // The cache is asked first, and an idempotent route's key: a stored answer, a replay or a
    // key's refusal needs no token (cached-request.ts gets one for a fetch, keyedSend for a send).
    if (cacheRule(request) !== undefined || keyedRule(request) !== undefined) {
      done()
      return
    }
    withToken(request, done)
  }

  /** Gets the request its token: the one held, or the next one (waiting within TOKEN_WAIT_MS); `then` gets the reason none came. */
  function withToken (request: FastifyRequest, then: (err?: Error) => void): void {
    const token = tokens.current()
    if (token !== undefined) {
      request.token = token
      then()
      return
    }
    const waiting = tokens.get()
    options.tracing?.tokenWait(request, waiting)
    waiting.then((fresh) => {
      request.token = fresh
      then()
    }, then)
  }

  /** The idempotent rule whose key this request has yet to be judged by (none: no key to take, or taken). */
  function keyedRule (request: FastifyRequest) {
    return request.claim === null ? idempotency?.ruleFor(request.method, request.raw.url ?? '/') : undefined
  }

  /**
   * A keyed request that its key lets through: sent once it has its token. None came: refused
   * unsent, so its key is free again.
   */
  function keyedSend (request: FastifyRequest, reply: FastifyReply): void {
    withToken(request, (err) => {
      if (err === undefined) {
        send(request, reply)
        return
      }
      idempotency?.unsent(request.claim)
      errorHandler(err as FastifyError, request, reply)
    })
  }

  /** The rule with cache= whose stored answers may serve this GET or HEAD (none: it is sent as any request). */
  function cacheRule (request: FastifyRequest): (Rule & { cache: CacheOption }) | undefined {
    if (cache === undefined || request.fill !== null || !requestCacheable(request.method, request.headers)) return undefined
    const rule = quota.ruleFor(request.method, request.raw.url ?? '/')
    return rule?.cache === undefined ? undefined : rule as Rule & { cache: CacheOption }
  }

  const upstreamHost = new URL(upstreamUrl).host

  /**
   * Sends the request upstream once the quota guard lets it (one budget point per send: a
   * replay after a 401 is a second call the gateway counts), or answers a local 429.
   */
  function send (request: FastifyRequest, reply: FastifyReply): void {
    // The caller left while its body was read or a token awaited: nothing is sent for it.
    // (A cache fill's replay goes on for those who wait for it: its first send already went.)
    if (request.exchange.gone && !(request.fill !== null && request.replayed)) {
      abandon(request)
      return
    }
    // idempotency: an idempotent route's key is taken before anything is spent, or the request answered here.
    const keyed = keyedRule(request)
    if (keyed !== undefined) {
      void idempotency?.decide(request, reply, keyed).then((go) => { if (go) keyedSend(request, reply) })
      return
    }
    if (!quota.active) {
      forward(request, reply, undefined, undefined)
      return
    }
    const cacheable = cacheRule(request)
    if (cacheable !== undefined) {
      cached(request, reply, cacheable).catch((err: unknown) => {
        request.fill?.flight.settle(undefined)
        request.log.error({ err }, 'read cache failed')
        if (!callerGone(request)) sendError(reply, new InternalError(), metrics)
      })
      return
    }
    const rule = quota.ruleFor(request.method, request.raw.url ?? '/')
    const verdict = quota.admit(rule, reply.raw)
    if (!(verdict instanceof Promise)) {
      admitted(request, reply, rule, verdict)
      return
    }
    verdict.then((v) => { admitted(request, reply, rule, v) }, (err: unknown) => {
      request.log.error({ err }, 'quota guard failed')
      idempotency?.unsent(request.claim)
      if (!callerGone(request)) sendError(reply, new InternalError(), metrics)
    })
  }

  /**
   * Nothing (more) is sent for this request: those waiting for its fetch go on by themselves,
   * and its key is free again (also after TI's 401, when the exchange's close has passed).
   */
  function abandon (request: FastifyRequest): void {
    request.fill?.flight.settle(undefined)
    idempotency?.unsent(request.claim)
  }

  function serveCached (reply: FastifyReply, entry: Entry, method: string, params: StatusParams, result: CacheResult): void {
    reply.hijack()
    if (fields === undefined) {
      cache?.serve(reply.raw, entry, method, params, result)
      return
    }
    const rule = quota.ruleFor(reply.request.method, reply.request.raw.url ?? '/')
    fields.withFields(rule, reply.raw, () => { cache?.serve(reply.raw, entry, method, params, result) })
  }

  /** Serves stored answers to this request's caller, while it is there. */
  function serverFor (request: FastifyRequest, reply: FastifyReply): Serve | undefined {
    return callerGone(request) ? undefined : (entry, params, result) => { serveCached(reply, entry, request.method, params, result) }
  }

  /** Answers a caller that waited for a fetch that failed with that fetch's failure. */
  function answerFailure (request: FastifyRequest, reply: FastifyReply, failure: Failure): void {
    if (callerGone(request)) return
    if ('answer' in failure) {
      reply.hijack()
      sendHeld(reply.raw, failure.answer)
      return
    }
    const error = isOwnError(failure.error) ? failure.error as FastifyError : new InternalError()
    // A waiter refused with its fetch's budget refusal reads the same RateLimit fields.
    if (error instanceof UpstreamRateLimitedError && failure.retryAfterSeconds !== undefined && quota.active) {
      fields?.refused(quota.ruleFor(request.method, request.raw.url ?? '/'), reply.raw, failure.retryAfterSeconds * 1000)
    }
    sendError(reply, error, metrics, failure.retryAfterSeconds === undefined ? {} : { retryAfterSeconds: failure.retryAfterSeconds })
  }

  const cached = cache === undefined
    ? async () => {}
    : cachedRequest({
      cache,
      quota,
      upstreamUrl,
      admitted,
      serve: serveCached,
      callerGone,
      forwardedPath,
      hasToken: () => tokens.current() !== undefined,
      needToken: async (request) => { request.token = tokens.current() ?? await tokens.get() },
      fail: answerFailure
    })

  function admitted (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, verdict: Verdict): void {
    const fill = request.fill
    if (verdict.ok) {
      if (!callerGone(request) || (fill !== null && request.replayed)) {
        if (fields === undefined) forward(request, reply, rule, verdict.ticket)
        else fields.withFields(rule, reply.raw, () => { forward(request, reply, rule, verdict.ticket) })
        return
      }
      // Gone after its point was taken and before anything was written: the point goes back
      // (and those waiting for this fetch go on by themselves).
      quota.refund(verdict.ticket)
      abandon(request)
      return
    }
    // Left while waiting for its budget: never sent, nothing spent (a waiter leads the next fetch).
    if (verdict.reason === 'gone' || callerGone(request)) {
      abandon(request)
      return
    }
    // A stored answer stands in for the refusal while it is within stale=.
    const standing = fill?.found === undefined ? undefined : cache?.standing(fill.found)
    if (fill?.found !== undefined && standing?.usable === true) {
      fill.flight.settle(fill.found, true)
      // A fresh one here was asked past (the caller's no-cache): it says the refresh was refused.
      const why = `${standing.fresh ? 'no-refresh' : 'stale'}-${verdict.reason}`
      serveCached(reply, fill.found, request.method, { hit: true, detail: why }, standing.fresh ? 'hit' : 'stale')
      return
    }
    if (fill !== null) cache?.missed(fill.rule.id)
    const { message, retryAfterSeconds } = quota.describe(verdict)
    fields?.refused(rule, reply.raw, verdict.retryAfterMs)
    request.log.debug({ rule: verdict.scope, reason: verdict.reason, retryAfter: retryAfterSeconds }, 'refused by the quota guard')
    const error = new UpstreamRateLimitedError(message)
    // Those waiting for this fetch are refused with it, at once, not one budget wait each.
    fill?.flight.fail({ error, retryAfterSeconds })
    sendError(reply, error, metrics, { retryAfterSeconds })
  }

  /** Sends the request upstream with its current token; the answer goes straight to the caller. */
  function forward (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, ticket: Ticket | undefined): void {
    const fill = cache === undefined ? null : request.fill
    // A request that waited (for its budget, or another's fetch) goes with the newest token:
    // the one it took may have been rejected meanwhile.
    const newest = tokens.current()
    if (newest !== undefined && request.token !== null && newest.generation > request.token.generation) request.token = newest
    const body = request.replayBody ?? (request.body as Readable | undefined) ?? null
    idempotency?.sending(request.claim)
    // A body on GET or HEAD is consumed, not forwarded (RFC 9110 §9.3.1): nor is its length.
    const headers = upstreamRequestHeaders(
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
      holdBack: (statusCode) => shouldReplay(request, statusCode) || quota.holdsBack(statusCode) ||
        (fill !== null && cache !== undefined && fillHolds(cache, fill, statusCode)) || (idempotency?.holds(request.claim) ?? false),
      outlivesCaller: fill !== null || idempotency?.keyed(request.claim) === true,
      heldBack: (answer) => {
        // idempotency: a keyed request's second 401 is its answer (the replay is the one resend).
        if (answer.statusCode === 401 && !(request.replayed && request.claim !== null)) {
          idempotency?.rejected(request.claim)
          replay(request, reply, answer)
          return
        }
        quota.heldBack(rule, answer)
        // idempotency: TI's answer is kept for the key's retries before the caller gets it.
        if (idempotency?.keyed(request.claim) === true) {
          void idempotency?.answered(request.claim, answer).then(() => { if (!callerGone(request)) { reply.hijack(); sendHeld(reply.raw, answer) } })
          return
        }
        if (fill !== null && cache !== undefined && fillHeld(cache, fill, answer, serverFor(request, reply))) return
        if (callerGone(request)) return
        // Passed on as it came, byte for byte.
        reply.hijack()
        sendHeld(reply.raw, answer)
      },
      // Nothing of the request reached the upstream: its budget point goes back.
      unsent: () => { quota.refund(ticket); idempotency?.unsent(request.claim) },
      failed: (err) => {
        idempotency?.failed(request.claim)
        if (fill !== null && cache !== undefined && fillFailed(cache, fill, serverFor(request, reply), { error: upstreamError(err) })) return
        if (fill !== null) cache?.missed(fill.rule.id)
        if (callerGone(request)) return
        if (err instanceof UpstreamBusyError) {
          request.log.warn({ queued: upstream.queued() }, 'no upstream connection came free in time')
        } else if (!(err instanceof BodyTooLargeError)) {
          request.log.warn({ code: (err as { code?: string }).code, reason: err.message }, 'upstream request failed')
        }
        sendError(reply, upstreamError(err), metrics)
      },
      started: () => {
        reply.hijack()
        if (fill === null) return
        fill.flight.settle(undefined)
        cache?.missed(fill.rule.id)
      },
      truncated: () => { request.exchange.truncated = true; idempotency?.failed(request.claim) }
    })
  }

  /**
   * A 401 may mean the token was revoked early, or something else entirely (Apigee's
   * InvalidApiKeyForGivenResource: the app is not subscribed to that API). The token
   * manager keeps the held token and refreshes (once, whatever the concurrency: the
   * generation check); the 401 is held back, and the request replayed once with the
   * new token if one comes and its body was kept, or the 401 passed on if none does.
   */
  function shouldReplay (request: FastifyRequest, statusCode: number): boolean {
    const token = request.token
    return statusCode === 401 && !request.replayed && token !== null &&
      (request.body === undefined || request.replayBody !== null) &&
      tokens.invalidate(token.generation)
  }

  function replay (request: FastifyRequest, reply: FastifyReply, answer: HeldAnswer): void {
    // A cache fill is replayed for those who wait for it, whether its own caller is there or
    // not; with its caller gone and nobody waiting, nothing more is sent.
    const fill = request.fill
    const forOthers = (): boolean => fill !== null && fill.flight.waiting() > 0
    if (callerGone(request) && !forOthers()) {
      abandon(request)
      return
    }
    request.replayed = true
    const rejected = request.token?.generation ?? 0
    void tokens.renewed(rejected).then((fresh) => {
      if (callerGone(request) && !forOthers()) {
        abandon(request)
        return
      }
      if (fresh === undefined) {
        request.fill?.flight.fail({ answer })
        // idempotency: the 401 is the answer, and TI did not act on it: the key is free again.
        idempotency?.unsent(request.claim)
        if (callerGone(request)) return
        // No newer token came: the caller gets the upstream's own answer.
        reply.hijack()
        sendHeld(reply.raw, answer)
        return
      }
      request.log.debug({ generation: fresh.generation }, 'replaying a request rejected with 401 with a new token')
      request.token = fresh
      send(request, reply)
    })
  }

  function errorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
    // A caller that left mid-upload is ordinary client behaviour, not a failure of ours.
    if (callerGone(request)) {
      request.log.debug({ code: error.code, reason: error.message }, 'caller closed the connection before its request was sent')
      return
    }
    if (isOwnError(error)) {
      sendError(reply, error, metrics)
    } else if ((error.statusCode ?? 500) >= 500) {
      request.log.error({ err: error }, 'request failed')
      sendError(reply, new InternalError(), metrics)
    } else {
      // Fastify's or a plugin's own 4xx: its code and message (which may echo the URL) stay in the log.
      request.log.debug({ code: error.code, reason: error.message }, 'request refused')
      sendError(reply, new BadRequestError('the request is malformed'), metrics)
    }
  }

  await app.register(httpProxy, {
    upstream: upstreamUrl,
    // http-proxy routes every path and method, refuses destinations that would leave
    // UPSTREAM_URL's base path and runs the preHandler; forward.ts sends the request
    // (its reply-from stays unused). Bodies: see the content-type parser above.
    // Stryker disable next-line BooleanLiteral: equivalent: http-proxy's own parsers pass the payload through untouched too
    proxyPayloads: false,
    httpMethods: [...FORWARDED_METHODS],
    preHandler: prepare,
    handler: (request, reply, dest) => {
      request.upstreamPath = dest
      send(request, reply)
    }
  })
}

/** The path and query as they go upstream. */
export function forwardedPath (request: FastifyRequest): string {
  // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
  const url = request.raw.url ?? '/'
  const queryAt = url.indexOf('?')
  // Stryker disable next-line StringLiteral: unreachable fallback: http-proxy's handler sets upstreamPath before any forwarding
  return (request.upstreamPath ?? '/') + (queryAt === -1 ? '' : url.slice(queryAt))
}

/** Whether the caller's connection is gone (it may not have been noticed by the exchange yet). */
export function callerGone (request: FastifyRequest): boolean {
  return request.exchange?.gone === true || request.raw.socket?.destroyed === true
}

/**
 * An answer may go out while the caller is still sending its body (the upstream
 * answered early, or the sidecar refused it). Node then reads the rest and throws it
 * away, for as long as the caller sends: bound that, so a huge or endless upload
 * cannot hold the connection (and a graceful shutdown) open.
 */
function discardAfterAnswer (req: IncomingMessage, reply: FastifyReply): void {
  const socket: Duplex = req.socket
  reply.raw.once('finish', () => {
    if (req.complete || socket.destroyed) return
    const timer = setTimeout(() => { socket.destroy() }, DISCARD_BODY_MS).unref()
    req.once('end', () => { clearTimeout(timer) })
    socket.once('close', () => { clearTimeout(timer) })
  })
}

function contentLength (request: FastifyRequest): number | undefined {
  const value = request.headers['content-length']
  return value === undefined ? undefined : Number(value)
}

async function readWhole (stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

/** Passes a stream through, failing it with BODY_TOO_LARGE past `max` bytes; a caller's abort fails it too. */
function limitBytes (body: Readable, max: number): Transform {
  let seen = 0
  const limited = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      seen += chunk.length
      callback(seen > max ? new BodyTooLargeError(max) : null, chunk)
    }
  })
  body.once('error', (err) => { limited.destroy(err) })
  return body.pipe(limited)
}

// Stryker disable next-line ObjectLiteral,StringLiteral,BooleanLiteral: equivalent: the proxy is the last and only routed plugin on its server; fastify-plugin's name, range and encapsulation change nothing a request meets
export default fp(proxy, { name: 'store-auth-proxy', fastify: '5.x', encapsulate: true })
