import { Transform, type Readable } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import httpProxy from '@fastify/http-proxy'
import type { Dispatcher } from 'undici'
import {
  BadRequestError, BodyTooLargeError, InternalError, isOwnError, MethodNotAllowedError, UpstreamBadResponseError, UpstreamTimeoutError,
  UpstreamUnreachableError, type ErrorBody
} from './errors.js'
import { forward } from './forward.js'
import { requestTargetProblem, upstreamRequestHeaders } from './http-rules.js'
import { methodLabel, statusClass, type Metrics } from './metrics.js'
import type { Token, TokenManager } from './token/token-manager.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The token this request is forwarded with; set by the preHandler before any forwarding. */
    token: Token | null
    /** A small body kept whole, so the request can be replayed once after a 401. */
    replayBody: Buffer | null
    /** The upstream path http-proxy resolved, for the replay. */
    upstreamPath: string | null
    /** Whether this request was already replayed with a fresh token. */
    replayed: boolean
  }
}

/**
 * Bodies up to this size are read whole before forwarding so that a request
 * rejected with 401 (a token revoked early) can be replayed once with a new token.
 * Larger bodies stream through and a 401 goes back to the caller.
 */
export const REPLAY_BODY_MAX_BYTES = 64 * 1024

/** The REST methods forwarded; TRACE is refused because the upstream would echo the injected token back. */
export const FORWARDED_METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT']

export interface ProxyOptions {
  upstreamUrl: string
  tokens: TokenManager
  metrics: Metrics
  /** The undici pool to the upstream, owned by the caller (TLS verification and timeouts are set there). */
  dispatcher: Dispatcher
  accessLog: boolean
  /** 0 for no limit. */
  maxBodyBytes: number
}

async function proxy (app: FastifyInstance, options: ProxyOptions): Promise<void> {
  const { upstreamUrl, tokens, metrics, dispatcher, accessLog, maxBodyBytes } = options

  app.decorateRequest('token', null)
  app.decorateRequest('replayBody', null)
  app.decorateRequest('upstreamPath', null)
  app.decorateRequest('replayed', false)
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

  /** preHandler: check the body size, keep a small body for a replay, and get the token. */
  function prepare (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
    const body = request.body as Readable | undefined
    if (body === undefined) {
      acquireToken(request, done)
      return
    }
    const length = contentLength(request)
    if (maxBodyBytes > 0 && length !== undefined && length > maxBodyBytes) {
      done(new BodyTooLargeError(maxBodyBytes))
      return
    }
    if (length !== undefined && length <= REPLAY_BODY_MAX_BYTES) {
      readWhole(body).then((buffer) => {
        request.replayBody = buffer
        acquireToken(request, done)
      }, done)
      return
    }
    // A chunked body has no length to check up front: count it as it streams.
    if (maxBodyBytes > 0 && length === undefined) request.body = body.pipe(limitBytes(maxBodyBytes))
    acquireToken(request, done)
  }

  function acquireToken (request: FastifyRequest, done: HookHandlerDoneFunction): void {
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

  const upstreamHost = new URL(upstreamUrl).host

  /** Sends the request upstream with its current token; the answer goes straight to the caller. */
  function send (request: FastifyRequest, reply: FastifyReply): void {
    const url = request.raw.url ?? '/'
    const queryAt = url.indexOf('?')
    const body = request.replayBody ?? (request.body as Readable | undefined) ?? null
    const headers = upstreamRequestHeaders({ ...request.headers, host: upstreamHost }, request.token?.authorization ?? '')
    // A body on GET or HEAD is consumed, not forwarded (RFC 9110 §9.3.1): nor is its length.
    if (body === null) delete headers['content-length']
    forward(dispatcher, {
      method: request.method,
      path: (request.upstreamPath ?? '/') + (queryAt === -1 ? '' : url.slice(queryAt)),
      headers,
      body
    }, reply.raw, {
      holdBack: (statusCode) => shouldReplay(request, statusCode),
      afterHeldBack: () => { replay(request, reply) },
      failed: (err) => {
        request.log.warn({ code: (err as { code?: string }).code, reason: err.message }, 'upstream request failed')
        sendError(reply, upstreamError(err))
      },
      started: () => { reply.hijack() }
    })
  }

  /**
   * A 401 to a request that carried the current token means it was revoked early:
   * invalidate it (once, whatever the concurrency: the generation check), and replay
   * the request once with a new token, if its body was kept.
   */
  function shouldReplay (request: FastifyRequest, statusCode: number): boolean {
    const token = request.token
    return statusCode === 401 && !request.replayed && token !== null &&
      (request.body === undefined || request.replayBody !== null) &&
      tokens.invalidate(token.generation)
  }

  function replay (request: FastifyRequest, reply: FastifyReply): void {
    request.replayed = true
    tokens.get().then((fresh) => {
      request.log.debug({ generation: fresh.generation }, 'replaying a request rejected with 401 with a new token')
      request.token = fresh
      send(request, reply)
    }, (err: FastifyError) => { sendError(reply, err) })
  }

  await app.register(httpProxy, {
    upstream: upstreamUrl,
    // http-proxy routes every path and method, refuses destinations that would leave
    // UPSTREAM_URL's base path, passes bodies through unparsed and runs the preHandler;
    // forward.ts sends the request (its reply-from, given the same pool, stays unused).
    undici: dispatcher as never,
    httpMethods: FORWARDED_METHODS,
    preHandler: prepare,
    handler: (request, reply, dest) => {
      request.upstreamPath = dest
      send(request, reply)
    }
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

/** Passes a stream through, failing it with BODY_TOO_LARGE past `max` bytes. */
function limitBytes (max: number): Transform {
  let seen = 0
  return new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      seen += chunk.length
      callback(seen > max ? new BodyTooLargeError(max) : null, chunk)
    }
  })
}

/** Maps an upstream failure to the sidecar's own error, so no internal address or stack reaches the caller. */
function upstreamError (error: Error): FastifyError {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof BodyTooLargeError) return e
  }
  const code = (error as { code?: string }).code ?? ''
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new UpstreamTimeoutError({ cause: error })
  // llhttp's parse errors, and what Node refuses to send on: the answer was not valid HTTP.
  if (code.startsWith('HPE_') || code === 'UND_ERR_INFO' || code === 'ERR_HTTP_INVALID_STATUS_CODE' || code === 'ERR_INVALID_CHAR' ||
      code === 'ERR_HTTP_INVALID_HEADER_VALUE') {
    return new UpstreamBadResponseError({ cause: error })
  }
  return new UpstreamUnreachableError({ cause: error })
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
