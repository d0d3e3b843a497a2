// The sends to TI as client spans: one per send, its traceparent what TI receives (unless
// switched off), TI's error identifiers and a 401's replay noted on the request's server span.
import { defaultTextMapSetter, propagation, SpanKind, SpanStatusCode, trace, type Span, type TextMapPropagator, type Tracer } from '@opentelemetry/api'
import type { ForwardHooks, Upstream, UpstreamRequest } from '../upstream/forward.js'
import { endClient, type Exchange } from './exchange.js'

/** Headers on TI's error answers that identify its execution (a gateway's message or request id). */
export const EXECUTION_ID_HEADERS = ['x-apigee-message-id', 'x-request-id', 'x-correlation-id', 'x-ti-execution-id']
/** The caller's trace headers never go to TI as they came: the client span's replace them, or none. */
const TRACE_HEADERS = new Set(['traceparent', 'tracestate', 'baggage'])

export interface SendTracingOptions {
  tracer: Tracer
  propagator: TextMapPropagator
  /** OTEL_PROPAGATE_UPSTREAM: TI receives the client span's traceparent. */
  propagateUpstream: boolean
  upstream: URL
  /** How sends leave (`direct`, or through the egress proxy), on every client span. */
  egressRoute: string
}

/** The pool, each send a client span whose context TI receives. */
export function traceSends (pool: Upstream, exchanges: WeakMap<object, Exchange>, options: SendTracingOptions): Upstream {
  const { tracer, upstream, egressRoute } = options
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
      pool.forward({ ...request, headers: headersFor(request, client, exchange, options) }, res, clientHooks(hooks, exchange, client))
    }
  }
}

/**
 * The request's headers for TI: the caller's trace headers out, the client span's in (unless
 * switched off). Never the caller's baggage (its tenant, its user): what it carries is for the
 * services behind the caller, not a third party, so it is dropped from what is injected.
 */
function headersFor (request: UpstreamRequest, client: Span, exchange: Exchange, { propagator, propagateUpstream }: SendTracingOptions): string[] {
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

/** The upstream's hooks for one send, each noting what became of it on the client span. */
function clientHooks (hooks: ForwardHooks, exchange: Exchange, client: Span): ForwardHooks {
  const fail = (type: string): void => {
    client.setAttribute('error.type', type)
    client.setStatus({ code: SpanStatusCode.ERROR })
  }
  // The read cache labels TI's answer when its status line arrives, for the case that it is
  // passed on as it comes; a held one is stored and served with its own label (request.ts).
  let passThrough: string | undefined
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
      passThrough = typeof cacheStatus === 'string' && cacheStatus.startsWith('store-auth-proxy') ? cacheStatus : undefined
    },
    started () {
      if (passThrough !== undefined) exchange.span.addEvent('cache', { 'cache.status': passThrough })
      hooks.started()
    },
    held (answer) {
      if (answer.statusCode === 401) exchange.span.addEvent('401 from TI', { 'token.replay': true })
      endClient(exchange)
      hooks.held(answer)
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
