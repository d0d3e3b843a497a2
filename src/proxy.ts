import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import httpProxy from '@fastify/http-proxy'
import type { Dispatcher } from 'undici'
import {
  BadRequestError, InternalError, isOwnError, MethodNotAllowedError, UpstreamBadResponseError, UpstreamTimeoutError,
  UpstreamUnreachableError, type ErrorBody
} from './errors.js'
import { callerResponseHeaders, requestTargetProblem, upstreamRequestHeaders } from './http-rules.js'
import { methodLabel, statusClass, type Metrics } from './metrics.js'
import type { Token, TokenManager } from './token/token-manager.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The token this request is forwarded with; set by the preHandler before any forwarding. */
    token: Token | null
  }
}

/** The REST methods forwarded; TRACE is refused because the upstream would echo the injected token back. */
export const FORWARDED_METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT']

export interface ProxyOptions {
  upstreamUrl: string
  tokens: TokenManager
  metrics: Metrics
  /** The undici pool to the upstream, owned by the caller (TLS verification and timeouts are set there). */
  dispatcher: Dispatcher
  accessLog: boolean
}

async function proxy (app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { upstreamUrl, tokens, metrics, dispatcher, accessLog } = options

  app.decorateRequest('token', null)
  app.setErrorHandler(errorHandler)
  app.setNotFoundHandler((request, reply) => {
    sendError(reply, new MethodNotAllowedError(methodLabel(request.method)))
  })

  app.addHook('onRequest', function observe (request, reply, done) {
    const started = performance.now()
    metrics.requestsInFlight.inc()
    // 'close' fires for finished and aborted answers alike, so the gauge never leaks.
    reply.raw.once('close', () => {
      metrics.requestsInFlight.dec()
      const durationMs = performance.now() - started
      const status = reply.raw.statusCode
      metrics.requests.inc({ method: methodLabel(request.method), status_class: statusClass(status) })
      metrics.requestDuration.observe(durationMs / 1000)
      if (accessLog) {
        request.log.info({
          method: request.method,
          url: request.url,
          statusCode: status,
          durationMs: Math.round(durationMs * 10) / 10,
          completed: reply.raw.writableFinished
        }, 'request')
      }
    })
    const problem = requestTargetProblem(request.url)
    if (problem !== undefined) {
      done(new BadRequestError(problem))
      return
    }
    done()
  })

  app.route({
    method: 'TRACE',
    url: '/*',
    handler: (request, reply) => { sendError(reply, new MethodNotAllowedError(request.method)) }
  })

  function acquireToken (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
    const token = tokens.current()
    if (token !== undefined) {
      request.token = token
      done()
      return
    }
    tokens.get().then((fresh) => {
      request.token = fresh
      done()
    }, done)
  }

  await app.register(httpProxy, {
    upstream: upstreamUrl,
    undici: dispatcher as never,
    httpMethods: FORWARDED_METHODS,
    disableRequestLogging: true,
    // Location headers pass through untouched: upstream status codes and end-to-end headers are the caller's.
    internalRewriteLocationHeader: false,
    preHandler: acquireToken,
    replyOptions: {
      // rewriteRequestHeaders is synchronous: the token was acquired in preHandler.
      rewriteRequestHeaders: (request, headers) =>
        upstreamRequestHeaders(headers, (request as FastifyRequest).token?.authorization ?? ''),
      rewriteHeaders: (headers) => callerResponseHeaders(headers),
      // reply-from retries idempotent requests on its own by default (even on 503);
      // the sidecar never repeats a request the caller sent once.
      retryDelay: () => null,
      onError: (reply, { error }) => { sendError(reply as FastifyReply, upstreamError(error)) }
    }
  })
}

/** Maps a reply-from failure to the sidecar's own error, so no internal address or stack reaches the caller. */
function upstreamError (error: FastifyError | Error): FastifyError {
  const code = (error as FastifyError).code
  switch (code) {
    case 'FST_REPLY_FROM_GATEWAY_TIMEOUT':
    case 'FST_REPLY_FROM_TIMEOUT':
      return new UpstreamTimeoutError({ cause: error })
    case 'FST_REPLY_FROM_BAD_GATEWAY':
      return new UpstreamBadResponseError({ cause: error })
    default:
      return new UpstreamUnreachableError({ cause: error })
  }
}

function sendError (reply: FastifyReply, error: FastifyError): void {
  const retryAfter = (error as { retryAfterSeconds?: number }).retryAfterSeconds
  if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter))
  const body: ErrorBody = { error: error.code, message: error.message }
  reply.code(error.statusCode ?? 500).type('application/json').send(body)
}

function errorHandler (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
  const status = error.statusCode ?? 500
  if (status >= 500 && !isOwnError(error)) {
    request.log.error({ err: error }, 'request failed')
    sendError(reply, new InternalError())
    return
  }
  if (status < 500 && error.code === undefined) {
    sendError(reply, new BadRequestError(error.message))
    return
  }
  sendError(reply, error)
}

export default fp(proxy, { name: 'store-auth-proxy', fastify: '5.x', encapsulate: true })
