// What one proxied request did, as spans: a server span per exchange continuing the caller's
// context (W3C traceparent), a client span per send to TI whose traceparent TI receives, and
// the sidecar's decisions as events on the server span: overload admission or shed, the wait
// for a token (linked to the token request's own span, shared by every request that waits),
// the quota verdict, the cache's answer, a 401 replay, TI's error identifiers. The proxy's
// parts are wrapped (quota guard, upstream pool, read cache), not edited: with tracing off
// none of this is loaded. HTTP attributes follow the semantic conventions (http.*, url.*).
import type { ServerResponse } from 'node:http'
import {
  defaultTextMapGetter, defaultTextMapSetter, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span,
  type TextMapPropagator, type Tracer
} from '@opentelemetry/api'
import type { FastifyRequest } from 'fastify'
import type { Rule } from '../config/rate-limit-rules.js'
import type { QuotaGuard, Verdict } from '../quota/guard.js'
import type { ForwardHooks, Upstream, UpstreamRequest } from '../upstream/forward.js'
import type { ReadCache } from '../cache/read-cache.js'

/** Headers on TI's error answers that identify its execution (a gateway's message or request id). */
export const EXECUTION_ID_HEADERS = ['x-apigee-message-id', 'x-request-id', 'x-correlation-id', 'x-ti-execution-id']
/** The caller's trace headers never go to TI as they came: the client span's replace them, or none. */
const TRACE_HEADERS = new Set(['traceparent', 'tracestate', 'baggage'])

interface Exchange {
  readonly method: string
  readonly span: Span
  /** The caller's context, and the server span in it. */
  readonly context: Context
  sends: number
  client: Span | undefined
}

export interface RequestTracingOptions {
  tracer: Tracer
  propagator: TextMapPropagator
  /** OTEL_PROPAGATE_UPSTREAM: TI receives the client span's traceparent. */
  propagateUpstream: boolean
  upstreamUrl: string
  /** How sends leave (`direct`, or through the egress proxy), on every client span. */
  egressRoute: string
}

/** A rule's path pattern: the low-cardinality route of its requests (http.route). */
const routeOf = (rule: Rule): string => rule.id.slice(rule.id.indexOf(' ') + 1)

export function createRequestTracing (options: RequestTracingOptions) {
  const { tracer, propagator, propagateUpstream, egressRoute } = options
  const upstream = new URL(options.upstreamUrl)
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

  function endClient (exchange: Exchange): void {
    exchange.client?.end()
    exchange.client = undefined
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

  function noteVerdict (exchange: Exchange, quota: QuotaGuard, rule: Rule | undefined, verdict: Verdict, startedAt: number): void {
    const attributes: Attributes = { 'quota.rule': rule?.id ?? 'upstream', 'quota.backend': quota.backend(), 'quota.waited_ms': Math.round(performance.now() - startedAt) }
    if (verdict.ok) attributes['quota.verdict'] = verdict.delayed ? 'waited' : 'admitted'
    else {
      attributes['quota.verdict'] = verdict.reason === 'gone' ? 'gone' : 'refused'
      if (verdict.reason !== 'gone') Object.assign(attributes, { 'quota.reason': verdict.reason, 'quota.retry_after_ms': verdict.retryAfterMs })
    }
    exchange.span.addEvent('quota', attributes)
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

  /**
   * The request's headers for TI: the caller's trace headers out, the client span's in (unless
   * switched off). Never the caller's baggage (its tenant, its user): what it carries is for the
   * services behind the caller, not a third party, so it is dropped from what is injected.
   */
  function headersFor (request: UpstreamRequest, client: Span, exchange: Exchange): string[] {
    const headers: string[] = []
    for (let i = 0; i < request.headers.length; i += 2) {
      const name = request.headers[i] ?? ''
      if (!TRACE_HEADERS.has(name.toLowerCase())) headers.push(name, request.headers[i + 1] ?? '')
    }
    if (!propagateUpstream) return headers
    const carrier: Record<string, string> = {}
    propagator.inject(propagation.deleteBaggage(trace.setSpan(exchange.context, client)), carrier, defaultTextMapSetter)
    for (const [name, value] of Object.entries(carrier)) headers.push(name, value)
    return headers
  }

  function clientHooks (hooks: ForwardHooks, exchange: Exchange, client: Span): ForwardHooks {
    const fail = (type: string): void => {
      client.setAttribute('error.type', type)
      client.setStatus({ code: SpanStatusCode.ERROR })
    }
    return {
      ...hooks,
      answer (statusCode, headers) {
        hooks.answer?.(statusCode, headers)
        client.setAttribute('http.response.status_code', statusCode)
        if (statusCode >= 400) {
          const id = EXECUTION_ID_HEADERS.map((h) => headers[h]).find((v) => v !== undefined)
          if (id !== undefined) exchange.span.setAttribute('ti.execution_id', String(id))
          if (statusCode >= 500) fail(String(statusCode))
        }
        const cacheStatus = headers['cache-status']
        if (typeof cacheStatus === 'string' && cacheStatus.startsWith('store-auth-proxy')) exchange.span.addEvent('cache', { 'cache.status': cacheStatus })
      },
      heldBack (answer) {
        if (answer.statusCode === 401) exchange.span.addEvent('401 from TI', { 'token.replay': true })
        endClient(exchange)
        hooks.heldBack(answer)
      },
      unsent () {
        client.addEvent('unsent')
        hooks.unsent?.()
      },
      failed (err) {
        fail((err as { code?: string }).code ?? err.name)
        endClient(exchange)
        hooks.failed(err)
      },
      truncated () {
        fail('truncated')
        hooks.truncated()
      }
    }
  }

  /** The pool, each send a client span whose context TI receives. */
  function wrapUpstream (pool: Upstream): Upstream {
    return {
      ...pool,
      forward (request, res, hooks) {
        const exchange = exchanges.get(res)
        if (exchange === undefined) return pool.forward(request, res, hooks)
        exchange.sends += 1
        if (exchange.sends > 1) exchange.span.addEvent('replay', { 'http.request.resend_count': exchange.sends - 1 })
        endClient(exchange)
        const client = tracer.startSpan(request.method, {
          kind: SpanKind.CLIENT,
          attributes: {
            'http.request.method': request.method,
            'server.address': upstream.hostname,
            'server.port': Number(upstream.port === '' ? (upstream.protocol === 'https:' ? 443 : 80) : upstream.port),
            'url.full': upstream.origin + request.path.split('?')[0],
            'egress.route': egressRoute,
            ...(exchange.sends > 1 ? { 'http.request.resend_count': exchange.sends - 1 } : {})
          }
        }, exchange.context)
        exchange.client = client
        pool.forward({ ...request, headers: headersFor(request, client, exchange) }, res, clientHooks(hooks, exchange, client))
      }
    }
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
