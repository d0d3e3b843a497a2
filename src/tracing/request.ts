// What one forwarded request did, as spans: a server span per exchange continuing the caller's
// context (W3C traceparent), a client span per send to TI whose traceparent TI receives, and
// the sidecar's decisions as events on the server span: overload admission or shed, the wait
// for a token (linked to the token request's own span, shared by every request that waits),
// the quota verdict, the cache's answer, a 401 replay, TI's error identifiers. The request
// path's parts are wrapped (quota guard, upstream pool, read cache), not edited: with tracing off
// none of this is loaded. HTTP attributes follow the semantic conventions (http.*, url.*).
import type { ServerResponse } from 'node:http'
import {
  defaultTextMapGetter, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span
} from '@opentelemetry/api'
import type { FastifyRequest } from 'fastify'
import type { Rule } from '../config/rate-limit-rules.js'
import type { QuotaGuard, Verdict } from '../quota/guard.js'
import type { Upstream } from '../upstream/forward.js'
import type { ReadCache } from '../cache/read-cache.js'
import { endClient, type Exchange } from './exchange.js'
import { traceSends, type SendTracingOptions } from './upstream-spans.js'

export { EXECUTION_ID_HEADERS } from './upstream-spans.js'

export interface RequestTracingOptions extends Omit<SendTracingOptions, 'upstream'> {
  upstreamUrl: string
}

/** A rule's path pattern: the low-cardinality route of its requests (http.route). */
const routeOf = (rule: Rule): string => rule.id.slice(rule.id.indexOf(' ') + 1)

export function createRequestTracing (options: RequestTracingOptions) {
  const { tracer, propagator, propagateUpstream, egressRoute } = options
  const sendOptions: SendTracingOptions = { tracer, propagator, propagateUpstream, upstream: new URL(options.upstreamUrl), egressRoute }
  /** By the caller's response, and its request. */
  const exchanges = new WeakMap<object, Exchange>()
  const logged = new WeakMap<object, Span>()

  /** onRequest: the server span, ended when the answer closes (sent whole or not). */
  function begin (request: FastifyRequest, res: ServerResponse): void {
    const parent = propagator.extract(ROOT_CONTEXT, request.headers, defaultTextMapGetter)
    const url = request.raw.url ?? '/'
    const queryAt = url.indexOf('?')
    const span = tracer.startSpan(request.method, {
      kind: SpanKind.SERVER,
      attributes: {
        'http.request.method': request.method,
        'url.path': queryAt === -1 ? url : url.slice(0, queryAt),
        'url.scheme': 'http',
        'network.protocol.version': request.raw.httpVersion,
        ...(request.headers['user-agent'] === undefined ? {} : { 'user_agent.original': request.headers['user-agent'] })
      }
    }, parent)
    const exchange: Exchange = { method: request.method, span, context: trace.setSpan(parent, span), sends: 0, client: undefined }
    exchanges.set(res, exchange)
    exchanges.set(request.raw, exchange)
    logged.set(request.log, span)
    res.once('close', () => {
      endClient(exchange)
      if (res.headersSent) span.setAttribute('http.response.status_code', res.statusCode)
      if (!res.writableFinished) span.setAttribute('error.type', res.headersSent ? 'truncated' : 'aborted')
      if (!res.writableFinished || (res.headersSent && res.statusCode >= 500)) span.setStatus({ code: SpanStatusCode.ERROR })
      span.end()
    })
  }

  /** The overload manager admitted the request, or shed it (`reason`). */
  function overload (res: ServerResponse, reason: string | undefined): void {
    exchanges.get(res)?.span.addEvent('overload', reason === undefined ? { 'overload.admitted': true } : { 'overload.admitted': false, 'overload.reason': reason })
  }

  /**
   * The token request the waiting requests share: one span from the first wait to the end of
   * the last (the token manager fetches once for all of them), each wait linked to it.
   */
  let tokenRequest: { span: Span, waiting: number } | undefined

  /** The request waits for a token: a span of its own, linked to the token request's. */
  function tokenWait (request: FastifyRequest, waiting: Promise<unknown>): void {
    const exchange = exchanges.get(request.raw)
    if (exchange === undefined) return
    const shared = tokenRequest ??= { span: tracer.startSpan('token request', { kind: SpanKind.CLIENT }), waiting: 0 }
    shared.waiting += 1
    const wait = tracer.startSpan('wait for token', { links: [{ context: shared.span.spanContext() }] }, exchange.context)
    const end = (ok: boolean) => (): void => {
      if (!ok) wait.setStatus({ code: SpanStatusCode.ERROR })
      wait.end()
      shared.waiting -= 1
      if (shared.waiting > 0) return
      if (!ok) shared.span.setStatus({ code: SpanStatusCode.ERROR })
      shared.span.end()
      if (tokenRequest === shared) tokenRequest = undefined
    }
    waiting.then(end(true), end(false))
  }

  /** The guard, its verdicts noted on the request's span (and its rule's route named). */
  function wrapQuota (quota: QuotaGuard): QuotaGuard {
    return {
      ...quota,
      admit (rule, caller, admitOptions) {
        const exchange = exchanges.get(caller)
        const verdict = quota.admit(rule, caller, admitOptions)
        if (exchange === undefined || (rule === undefined && !quota.active)) return verdict
        if (rule !== undefined) {
          exchange.span.setAttribute('http.route', routeOf(rule))
          exchange.span.updateName(`${exchange.method} ${routeOf(rule)}`)
        }
        const startedAt = performance.now()
        if (!(verdict instanceof Promise)) {
          noteVerdict(exchange, quota, rule, verdict, startedAt)
          return verdict
        }
        return verdict.then((v) => {
          noteVerdict(exchange, quota, rule, v, startedAt)
          return v
        })
      }
    }
  }

  /** The read cache, each stored answer it serves noted with its result. */
  function wrapCache (cache: ReadCache): ReadCache {
    return {
      ...cache,
      serve (res, entry, method, params, result) {
        exchanges.get(res)?.span.addEvent('cache', { 'cache.result': result, ...(params.detail === undefined ? {} : { 'cache.detail': params.detail }) })
        cache.serve(res, entry, method, params, result)
      }
    }
  }

  /** The pool, each send a client span whose context TI receives. */
  function wrapUpstream (pool: Upstream): Upstream {
    return traceSends(pool, exchanges, sendOptions)
  }

  return {
    begin,
    overload,
    tokenWait,
    wrapQuota,
    wrapCache,
    wrapUpstream,
    /** The trace and span ids for a log line of this request's logger (pino's mixin). */
    logFields (logger: object): { trace_id: string, span_id: string } | undefined {
      const span = logged.get(logger)
      if (span === undefined) return undefined
      const { traceId, spanId } = span.spanContext()
      return { trace_id: traceId, span_id: spanId }
    }
  }
}

export type RequestTracing = ReturnType<typeof createRequestTracing>

/** The quota guard's verdict on the request, as an event on its server span. */
function noteVerdict (exchange: Exchange, quota: QuotaGuard, rule: Rule | undefined, verdict: Verdict, startedAt: number): void {
  const attributes: Attributes = { 'quota.rule': rule?.id ?? 'upstream', 'quota.backend': quota.backend(), 'quota.waited_ms': Math.round(performance.now() - startedAt) }
  if (verdict.ok) attributes['quota.verdict'] = verdict.delayed ? 'waited' : 'admitted'
  else {
    attributes['quota.verdict'] = verdict.reason === 'gone' ? 'gone' : 'refused'
    if (verdict.reason !== 'gone') Object.assign(attributes, { 'quota.reason': verdict.reason, 'quota.retry_after_ms': verdict.retryAfterMs })
  }
  exchange.span.addEvent('quota', attributes)
}
