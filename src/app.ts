import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { adminRoutes } from './admin.js'
import { systemClock, type Clock } from './clock.js'
import { trimCredential, type Config } from './config.js'
import { BadRequestError, HeadersTooLargeError, MethodNotAllowedError, RequestTimeoutError, type ErrorBody } from './errors.js'
import { egressDispatcher } from './egress-connection.js'
import { routeFor } from './egress-proxy.js'
import { createUpstream } from './forward.js'
import { createMetrics, methodLabel, statusClass, type Metrics } from './metrics.js'
import proxy, { observeExchange, sendError } from './proxy.js'
import { createQuotaGuard, type QuotaGuard } from './quota/guard.js'
import type { RedisStore } from './quota/redis-backend.js'
import { readSecretFile } from './secret-file.js'
import { configSummary } from './status.js'
import { createCredentialReader, credentialOrigin, type ReadFile } from './token/credentials.js'
import { createTokenClient, tokenEndpointUrl } from './token/token-client.js'
import { createTokenManager, type TokenManager } from './token/token-manager.js'

/** Connections kept to the upstream; requests beyond them queue rather than open more. */
export const UPSTREAM_CONNECTIONS = 128
export const UPSTREAM_CONNECT_TIMEOUT_MS = 10_000
/** How often the proxy listener checks its callers' header and request timeouts. */
export const CONNECTIONS_CHECK_MS = 2_000
/** While shutting down, how often connections that became idle are closed. */
export const IDLE_SWEEP_MS = 100

export interface AppDependencies {
  log: Logger
  clock?: Clock
  random?: () => number
  readFile?: ReadFile
  /** Dispatcher for token requests (tests); undici's global one otherwise. */
  tokenDispatcher?: Dispatcher
  /** Process metrics are off in tests, where many apps share one process. */
  defaultMetrics?: boolean
  /** Shown on the admin port's /status. */
  version?: string
}

export interface App {
  proxy: FastifyInstance
  admin: FastifyInstance
  tokens: TokenManager
  metrics: Metrics
  quota: QuotaGuard
  /** Fetches the first token; requests arriving before it wait for it (bounded by TOKEN_WAIT_MS). */
  start: () => Promise<void>
  /** Readiness turns 503 from here on; nothing else changes. */
  drain: () => void
  /** Stops accepting connections, lets in-flight requests finish, then releases everything. */
  close: () => Promise<void>
}

/** Builds the sidecar from a config object. Never listens: main.ts and the tests do. */
export async function buildApp (config: Config, deps: AppDependencies): Promise<App> {
  const { log, clock, random, readFile, tokenDispatcher, defaultMetrics = true, version = 'unknown' } = deps
  const rateLimits = config.rateLimits
  const metrics = createMetrics({ defaultMetrics, rateLimitRedis: rateLimits.redisUrl !== undefined })

  // The token endpoint and the upstream each go through the egress proxy, or direct (egress-proxy.ts).
  const tokenRoute = routeFor(config.authUrl, config.egressProxy)
  const tokenEgress = tokenDispatcher === undefined && tokenRoute.via === 'proxy'
    ? egressDispatcher(config.authUrl, tokenRoute, { connectTimeoutMs: Math.min(UPSTREAM_CONNECT_TIMEOUT_MS, config.tokenTimeoutMs) })
    : undefined
  const fetchToken = createTokenClient({
    authUrl: config.authUrl,
    timeoutMs: config.tokenTimeoutMs,
    credentials: createCredentialReader(config.clientId, config.clientSecret, readFile),
    ...(tokenDispatcher === undefined ? {} : { dispatcher: tokenDispatcher }),
    ...(tokenEgress === undefined ? {} : { dispatcher: tokenEgress.dispatcher })
  })
  const tokens = createTokenManager({
    fetchToken,
    log: log.child({ component: 'token' }),
    metrics,
    refreshMarginMs: config.tokenRefreshMarginMs,
    waitMs: config.tokenWaitMs,
    tokenUrl: tokenEndpointUrl(config.authUrl),
    credentials: { clientId: credentialOrigin('CLIENT_ID', config.clientId), clientSecret: credentialOrigin('CLIENT_SECRET', config.clientSecret) },
    ...(clock === undefined ? {} : { clock }),
    ...(random === undefined ? {} : { random })
  })

  // One keep-alive pool to the upstream origin, TLS verified, with a bounded queue.
  const upstream = createUpstream({
    url: config.upstreamUrl,
    connections: UPSTREAM_CONNECTIONS,
    connectTimeoutMs: Math.min(UPSTREAM_CONNECT_TIMEOUT_MS, config.upstreamTimeoutMs),
    timeoutMs: config.upstreamTimeoutMs,
    queueLimit: config.upstreamQueueLimit,
    queueTimeoutMs: config.upstreamQueueTimeoutMs,
    queueGauge: metrics.upstreamQueued,
    route: routeFor(config.upstreamUrl, config.egressProxy)
  })

  // ioredis is loaded only when a Redis URL is set (issue 13: start-up time and memory per pod).
  let redis: RedisStore | undefined
  if (rateLimits.redisUrl !== undefined) {
    const { createRedisStore, redisKeyPrefix } = await import('./quota/redis-backend.js')
    const clientId = 'value' in config.clientId
      ? config.clientId.value
      : trimCredential(await (readFile ?? readSecretFile)(config.clientId.file))
    redis = createRedisStore({
      url: rateLimits.redisUrl, timeoutMs: rateLimits.redisTimeoutMs, prefix: redisKeyPrefix(config.authUrl, clientId)
    })
  }
  const quota = createQuotaGuard({
    config: rateLimits,
    clock: clock ?? systemClock,
    log: log.child({ component: 'quota' }),
    metrics,
    ...(redis === undefined ? {} : { redis })
  })

  let draining = false
  let closing: Promise<void> | undefined

  const proxyLog = log.child({ listener: 'proxy' })
  const proxyServer = Fastify({
    loggerInstance: proxyLog as FastifyBaseLogger,
    // Fastify's own per-request lines are off; proxy.ts writes one access line when ACCESS_LOG is on.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // Limits on what callers may send (see config.ts): oversized heads get 431,
    // slow heads and bodies are cut off, idle connections closed.
    http: {
      maxHeaderSize: config.maxHeaderBytes,
      headersTimeout: config.headersTimeoutMs,
      // Node checks those timeouts every 30 s by default; check often enough to honour them.
      connectionsCheckingInterval: Math.min(CONNECTIONS_CHECK_MS, config.headersTimeoutMs)
    },
    requestTimeout: config.requestTimeoutMs,
    keepAliveTimeout: config.keepAliveTimeoutMs,
    connectionTimeout: config.idleTimeoutMs,
    // What Node's parser refuses never reaches a route: answered here, in the same shape.
    clientErrorHandler (err, socket) {
      // Nobody to answer: a reset connection (as in Fastify's own handler), or a caller
      // that closed mid-message (its exchange counts itself as aborted).
      if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || socket.destroyed) {
        socket.destroy()
        return
      }
      const error = err.code === 'HPE_HEADER_OVERFLOW'
        ? new HeadersTooLargeError(config.maxHeaderBytes)
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new RequestTimeoutError() : new BadRequestError('the request is not valid HTTP')
      // The head was parsed and an exchange is under way (the body was not valid HTTP, such as
      // an obfuscated Transfer-Encoding): it answers, and counts itself, if nothing went out yet.
      const res = (socket as { _httpMessage?: ServerResponse | null })._httpMessage
      if (res != null) {
        if (res.headersSent) {
          socket.destroy()
          return
        }
        metrics.errors.inc({ code: error.code })
        res.once('finish', () => { socket.destroy() })
        const body = errorJson(error)
        res.writeHead(error.statusCode ?? 400, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' })
        res.end(body)
        return
      }
      const head = (err as { rawPacket?: unknown }).rawPacket
      answerRaw(socket, Buffer.isBuffer(head) ? head : undefined, error)
      socket.destroySoon()
    },
    // A path whose percent-encoding does not decode (`/%zz`) fails in the router, before
    // any hook: answer it like every other refusal, counted and logged, the URL not echoed.
    frameworkErrors: (error, request, reply) => {
      observeExchange(request, reply.raw, metrics, config.accessLog)
      sendError(reply, error.code === 'FST_ERR_BAD_URL'
        ? new BadRequestError('the request path has invalid percent-encoding')
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
    metrics.errors.inc({ code: error.code })
    metrics.recordExchange(methodLabel(method), statusClass(status), 'completed', 0)
    if (config.accessLog) proxyLog.info({ method, statusCode: status, outcome: 'completed', error: error.code }, 'request')
    const body = errorJson(error)
    if (socket.writable) {
      socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
    }
  }
  // Node hands CONNECT to a 'connect' listener, or drops the connection without a word.
  proxyServer.server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    answerRaw(socket, Buffer.from('CONNECT '), new MethodNotAllowedError('CONNECT'))
  })
  await proxyServer.register(proxy, {
    upstreamUrl: config.upstreamUrl,
    tokens,
    metrics,
    upstream,
    accessLog: config.accessLog,
    maxBodyBytes: config.maxBodyBytes,
    quota
  })

  const admin = Fastify({
    loggerInstance: log.child({ listener: 'admin' }) as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true })
  })
  await admin.register(adminRoutes, {
    tokens, metrics, quota, isDraining: () => draining, version, config: configSummary(config), ...(clock === undefined ? {} : { clock })
  })

  return {
    proxy: proxyServer,
    admin,
    tokens,
    metrics,
    quota,
    start: async () => { await Promise.all([tokens.start(), quota.start()]) },
    drain: () => { draining = true },
    close () {
      closing ??= closeAll()
      return closing
    }
  }

  async function closeAll (): Promise<void> {
    draining = true
    // server.close() closes the connections idle at that moment; keep-alive
    // connections of requests still in flight become idle only later, and would
    // hold the process open until the caller's keep-alive timeout.
    let sweep: NodeJS.Timeout | undefined
    const closeIdle = (): void => {
      proxyServer.server.closeIdleConnections()
      sweep = setTimeout(closeIdle, IDLE_SWEEP_MS).unref()
    }
    closeIdle()
    await proxyServer.close().finally(() => { clearTimeout(sweep) })
    tokens.stop()
    await quota.close()
    await upstream.close()
    await tokenEgress?.close()
    await admin.close()
  }
}

/** The body of every answer the sidecar makes itself (see errors.ts). */
function errorJson (error: FastifyError): string {
  return JSON.stringify({ error: error.code, message: error.message } satisfies ErrorBody)
}
