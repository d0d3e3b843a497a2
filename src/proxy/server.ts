// The proxy listener: Fastify with the callers' limits (head size, timeouts), the answers
// Node's parser forces (CONNECT, malformed HTTP), then the request path in order: tracing's
// first hook, the waiting connections, the connection gate, admission, the route policy, and
// the request path's stages (plugin.ts). app.ts builds the parts and hands them here.
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { ReadCache } from '../cache/read-cache.js'
import type { Config } from '../config/load.js'
import { BadRequestError, MethodNotAllowedError, RequestTimeoutError, sendError } from '../http/errors.js'
import type { IdempotencyStage } from '../idempotency/stage.js'
import { methodLabel, statusClass, type Metrics } from '../metrics.js'
import { admitRequests, continueOnlyWhenAdmitted, headOverflowError, limitHeaderCount } from '../overload/admission.js'
import { endOverloaded, gateConnections } from '../overload/connection-gate.js'
import type { OverloadManager } from '../overload/manager.js'
import { followWaiting } from '../overload/waiting-connections.js'
import { headCost, keptHeads } from '../overload/waters.js'
import { enforcePolicy } from '../policy/policy.js'
import { testOrderUpstream } from '../policy/test-orders.js'
import type { QuotaGuard } from '../quota/guard.js'
import type { TokenManager } from '../token/token-manager.js'
import type { RequestTracing } from '../tracing/request.js'
import type { Upstream } from '../upstream/forward.js'
import { pendingResponse } from '../upstream/socket-internals.js'
import requestPath, { observeExchange } from './plugin.js'

/** How often the proxy listener checks its callers' header and request timeouts. */
export const CONNECTIONS_CHECK_MS = 2_000

export interface ProxyParts { tokens: TokenManager, metrics: Metrics, upstream: Upstream, quota: QuotaGuard, overload: OverloadManager, cache?: ReadCache, idempotency?: IdempotencyStage, tracing?: RequestTracing }

/** The proxy listener: Fastify with the callers' limits, the answers Node's parser forces, and the request path. */
export async function createProxyServer (config: Config, log: Logger, { tokens, metrics, upstream, quota, overload, cache, idempotency, tracing }: ProxyParts): Promise<FastifyInstance> {
  const proxyLog = log.child({ listener: 'proxy' })
  const proxyServer = Fastify({
    loggerInstance: proxyLog as FastifyBaseLogger,
    // Fastify's own per-request lines are off; exchange.ts writes one access line when ACCESS_LOG is on.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // Limits on what callers may send (src/config/schema.ts): oversized heads get 431,
    // slow heads and bodies are cut off, idle connections closed.
    http: {
      maxHeaderSize: config.listener.maxHeaderBytes,
      headersTimeout: config.listener.headersTimeoutMs,
      // Node checks those timeouts every 30 s by default; check often enough to honour them.
      connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, config.listener.headersTimeoutMs)
    },
    requestTimeout: config.listener.requestTimeoutMs,
    keepAliveTimeout: config.listener.keepAliveTimeoutMs,
    connectionTimeout: config.listener.idleTimeoutMs,
    // What Node's parser refuses never reaches a route: answered here, in the same shape.
    clientErrorHandler (err, socket) {
      // Nobody to answer: a reset connection (as in Fastify's own handler), or a caller
      // that closed mid-message (its exchange counts itself as aborted).
      if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed) {
        socket.destroy()
        return
      }
      const rawPacket = (err as { rawPacket?: unknown }).rawPacket
      const head = Buffer.isBuffer(rawPacket) ? rawPacket : undefined
      const error = err.code === 'HPE_HEADER_OVERFLOW'
        ? headOverflowError(head, config.listener.maxHeaderCount, config.listener.maxHeaderBytes)
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new RequestTimeoutError() : new BadRequestError('the request is not valid HTTP')
      // The head was parsed and an exchange is under way (the body was not valid HTTP, such as
      // an obfuscated Transfer-Encoding): it answers, and counts itself, if nothing went out yet.
      const res = pendingResponse(socket)
      if (res?.req.complete === true) {
        // Its request was read whole: the error is the next pipelined one's. The exchange under
        // way (an order TI may have) keeps its own answer; the connection closes after it.
        if (res.writableFinished) socket.destroySoon()
        else res.once('finish', () => { socket.destroySoon() })
        return
      }
      if (res != null) {
        if (res.headersSent) {
          socket.destroy()
          return
        }
        res.once('finish', () => { socket.destroy() })
        sendError(res, error, metrics)
        return
      }
      answerRaw(socket, head, error)
      socket.destroySoon()
    },
    // A path whose percent-encoding does not decode (`/%zz`) fails in the router, before
    // any hook: answer it like every other refusal, counted and logged, the URL not echoed.
    frameworkErrors: (error, request, reply) => {
      observeExchange(request, reply.raw, metrics, config.listener.accessLog)
      sendError(reply, error.code === 'FST_ERR_BAD_URL'
        ? new BadRequestError('the request path has invalid percent-encoding')
        // Stryker disable next-line StringLiteral: unreachable: no route has a parameter of limited length or an async constraint
        : new BadRequestError('the request could not be routed'), metrics)
    }
  })
  /**
   * Answers on a bare socket, for what never becomes a Fastify request: CONNECT, and
   * requests Node's parser refuses (head too large or too slow, not valid HTTP). Same
   * JSON shape, counted and logged like every other answer; the connection is closed.
   */
  function answerRaw (socket: Duplex, head: Buffer | undefined, error: FastifyError): void {
    const status = error.statusCode ?? 400
    const method = /^([A-Z]+) /.exec(head?.toString('latin1', 0, 24) ?? '')?.[1] ?? 'OTHER'
    metrics.recordExchange(methodLabel(method), statusClass(status), 'completed', 0)
    if (config.listener.accessLog) proxyLog.info({ method, statusCode: status, outcome: 'completed', error: error.code }, 'request')
    sendError(socket, error, metrics)
  }
  // Node hands CONNECT to a 'connect' listener, or drops the connection without a word.
  proxyServer.server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    answerRaw(socket, Buffer.from('CONNECT '), new MethodNotAllowedError('CONNECT'))
  })
  // Tracing (src/tracing/): a server span from the request's first hook; the request path's parts wrapped.
  if (tracing !== undefined) proxyServer.addHook('onRequest', (request, reply, done) => { tracing.begin(request, reply.raw); done() })
  // Unfinished heads grow where admission cannot see them: closed, oldest first, as private
  // memory nears the limit. Followed before the gate, which hands on only what it admits.
  const cost = headCost(config.listener.maxHeaderBytes, config.listener.maxHeaderCount)
  const kept = keptHeads(cost)
  const waiting = followWaiting(proxyServer.server, {
    answerHead: (socket) => { endOverloaded(socket, metrics) },
    // Pipelining callers' heads behind an exchange are read on, as many as the kept heads (what
    // fits 3 MiB): beyond them, reading stops until the exchange is answered.
    readBehind: kept,
    unfollowed: (why, first) => {
      metrics.unfollowedConnections.inc()
      if (first) proxyLog.warn({ why }, 'unfinished request heads not followed (Node\'s HTTP parser is not the one expected): not bounded in number nor closed on memory, MAX_CONNECTIONS and admission still hold')
    }
  })
  overload.closeWaitingOnMemory(waiting, cost, kept)
  if (config.overload.maxConnections > 0) gateConnections(proxyServer.server, overload, metrics)
  limitHeaderCount(proxyServer, config.listener.maxHeaderCount)
  continueOnlyWhenAdmitted(proxyServer)
  admitRequests(proxyServer, { overload, metrics, accessLog: config.listener.accessLog, maxHeaderCount: config.listener.maxHeaderCount, headBytes: cost, maxBodyBytes: config.listener.maxBodyBytes, ...(tracing === undefined ? {} : { traced: tracing.overload }) })
  enforcePolicy(proxyServer, config.policy, metrics, config.listener.accessLog, proxyLog)
  await proxyServer.register(requestPath, {
    upstreamUrl: config.upstream.url,
    tokens,
    metrics,
    // Traced closest to the pool: a client span per send that reaches it.
    upstream: config.policy.testOrders ? testOrderUpstream(tracing?.wrapUpstream(upstream) ?? upstream, config.upstream.url) : (tracing?.wrapUpstream(upstream) ?? upstream),
    accessLog: config.listener.accessLog,
    maxBodyBytes: config.listener.maxBodyBytes,
    quota: tracing?.wrapQuota(quota) ?? quota,
    rateLimitHeaders: config.rateLimits.headers,
    ...(cache === undefined ? {} : { cache: tracing?.wrapCache(cache) ?? cache }),
    ...(idempotency === undefined ? {} : { idempotency }),
    ...(tracing === undefined ? {} : { tracing })
  })
  return proxyServer
}
