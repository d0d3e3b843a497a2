import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { createAdminServer } from './admin/server.js'
import { idempotencyReleaseRoute } from './admin/idempotency-release.js'
import { systemClock, type Clock } from './clock.js'
import { trimCredential } from './config/credentials.js'
import type { Config } from './config/load.js'
import { egressDispatcher } from './egress/connection.js'
import { routeFor } from './egress/route.js'
import { BadRequestError, MethodNotAllowedError, RequestTimeoutError, sendError } from './errors.js'
import { createUpstream, type Upstream } from './upstream/forward.js'
import { memoryLimit, readPrivateBytes as privateBytesIn, type ReadSystemFile } from './overload/memory-limit.js'
import { createMetrics, methodLabel, statusClass, type Metrics } from './metrics.js'
import { admitRequests, continueOnlyWhenAdmitted, headOverflowError, limitHeaderCount } from './overload/admission.js'
import { gateConnections } from './overload/connection-gate.js'
import { createOverloadManager, type OverloadManager } from './overload/manager.js'
import proxy, { observeExchange } from './proxy/plugin.js'
import { createQuotaGuard, type QuotaGuard } from './quota/guard.js'
import { exportBudgets } from './quota/rate-limit-fields.js'
import type { TracingConfig } from './config/tracing.js'
import type { Tracing } from './tracing/index.js'
import type { RequestTracing } from './tracing/request.js'
import { logTraceFields } from './logger.js'
import type { FleetStore, FleetTiming } from './quota/fleet-store.js'
import { createLedger } from './quota/ledger.js'
import { createLedgerWriter, readLedgerFile, restoreLedger } from './quota/ledger-file.js'
import { newMemberId } from './quota/store.js'
import type { Limit } from './config/rate-limit-rules.js'
import type { ReadCache } from './cache/read-cache.js'
import type { SharedCache } from './cache/redis-cache.js'
import { rereadRedisUrl } from './config/rate-limits.js'
import { readSecretFile, readSecretFileSync } from './config/secret-file.js'
import { configSummary } from './admin/status.js'
import { createCredentialReader, credentialOrigin, type ReadFile } from './token/credentials.js'
import { createTokenClient, tokenEndpointUrl } from './token/token-client.js'
import { createTokenManager, type TokenManager } from './token/token-manager.js'
import { pendingResponse } from './upstream/socket-internals.js'
import { createIdempotency, type IdempotencyTiming } from './idempotency/create.js'
import { enforcePolicy } from './policy/policy.js'
import { testOrderUpstream } from './policy/test-orders.js'
import type { IdempotencyStage } from './idempotency/stage.js'

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
  /** Dispatcher for token requests (tests); the sidecar's own otherwise, never undici's global one. */
  tokenDispatcher?: Dispatcher
  /** Process metrics are off in tests, where many apps share one process. */
  defaultMetrics?: boolean
  /** Shown on the admin port's /status. */
  version?: string
  /** The fleet protocol's timing (heartbeat, presence TTL, fresh-epoch grace); tests shorten it. */
  quotaTiming?: Partial<FleetTiming>
  /** The idempotency keys' epoch check, recovery window and pending margin (src/idempotency/create.ts); tests shorten them. */
  idempotencyTiming?: IdempotencyTiming
  /** Where the cgroup's memory limit is read from (memory-limit.ts); tests give fixture files. */
  readSystemFile?: ReadSystemFile
  /** Live memory for the overload manager (overload.ts liveBytes by default). */
  readLiveBytes?: () => number
  /** Private memory for the overload manager, undefined when unknown (memory-limit.ts readPrivateBytes by default). */
  readPrivateBytes?: () => number | undefined
  /** A full garbage collection for the overload manager (overload.ts fullCollection by default). */
  collectGarbage?: () => void
  /** A young-generation collection, paced by the bodies of shed requests (overload.ts youngCollection by default). */
  collectYoungGarbage?: () => void
}

export interface App {
  proxy: FastifyInstance
  admin: FastifyInstance
  tokens: TokenManager
  metrics: Metrics
  quota: QuotaGuard
  overload: OverloadManager
  /** Fetches the first token; requests arriving before it wait for it (bounded by TOKEN_WAIT_MS). */
  start: () => Promise<void>
  /** Readiness turns 503 from here on; nothing else changes. */
  drain: () => void
  /** Stops accepting connections, lets in-flight requests finish, then releases everything. */
  close: () => Promise<void>
}

/** Builds the sidecar from a config object. Never listens: main.ts and the tests do. */
export async function buildApp (config: Config, deps: AppDependencies): Promise<App> {
  const { log, clock, defaultMetrics = true, version = 'unknown' } = deps
  const rateLimits = config.rateLimits
  const metrics = createMetrics({ defaultMetrics, rateLimitRedis: rateLimits.redisUrl !== undefined })
  const { tokens, closeTokenEgress } = createTokens(config, deps, metrics)

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

  const { quota, cache } = await createQuota(config, deps, metrics)
  const overload = createOverload(config, deps, metrics)
  const idempotency = await createIdempotency(config, {
    log: log.child({ component: 'idempotency' }), clock: deps.clock ?? systemClock, metrics, ...(deps.readFile === undefined ? {} : { readFile: deps.readFile }), ...(deps.idempotencyTiming === undefined ? {} : { timing: deps.idempotencyTiming })
  })
  const tracing = config.tracing === undefined ? undefined : await startTracingFor(config, config.tracing, metrics, version)
  const proxyServer = await createProxyServer(config, log, {
    tokens,
    metrics,
    upstream,
    quota,
    overload,
    ...(cache === undefined ? {} : { cache }),
    ...(idempotency === undefined ? {} : { idempotency }),
    ...(tracing === undefined ? {} : { tracing: tracing.requests })
  })

  let draining = false
  let closing: Promise<void> | undefined

  const admin = await createAdminServer({
    log,
    metrics,
    maxConnections: config.adminMaxConnections,
    routes: {
      tokens, metrics, quota, overload, ...(cache === undefined ? {} : { cache }), ...(idempotency === undefined ? {} : { idempotency }), isDraining: () => draining, version, config: configSummary(config), statusEndpoint: config.statusEndpoint, statusFrom: config.statusFrom, ...(clock === undefined ? {} : { clock })
    }
  })
  if (idempotency !== undefined) await admin.register(idempotencyReleaseRoute, { release: idempotency.releaseKey })

  return {
    proxy: proxyServer,
    admin,
    tokens,
    metrics,
    quota,
    overload,
    start: async () => {
      overload.start()
      await Promise.all([tokens.start(), quota.start(), cache?.start(), idempotency?.start()])
    },
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
    overload.stop()
    await Promise.all([quota.close(), cache?.close(), idempotency?.close()])
    await upstream.close()
    await closeTokenEgress()
    await admin.close()
    await tracing?.shutdown()
  }
}

/** The token client and the manager that keeps one token fresh. */
function createTokens (config: Config, deps: AppDependencies, metrics: Metrics): { tokens: TokenManager, closeTokenEgress: () => Promise<void> } {
  const { log, clock, random, readFile, tokenDispatcher } = deps
  // The token endpoint goes through the egress proxy, or direct (egress/route.ts), on a pool of
  // the sidecar's own either way: never undici's global dispatcher, which NODE_USE_ENV_PROXY or
  // another module may have replaced, so the route /status shows is the route taken.
  const tokenRoute = routeFor(config.authUrl, config.egressProxy)
  const tokenEgress = tokenDispatcher === undefined
    ? egressDispatcher(config.authUrl, tokenRoute, { connectTimeoutMs: Math.min(UPSTREAM_CONNECT_TIMEOUT_MS, config.tokenTimeoutMs) })
    : { dispatcher: tokenDispatcher, close: async () => {} }
  const fetchToken = createTokenClient({
    authUrl: config.authUrl,
    timeoutMs: config.tokenTimeoutMs,
    credentials: createCredentialReader(config.clientId, config.clientSecret, readFile),
    dispatcher: tokenEgress.dispatcher
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
  return { tokens, closeTokenEgress: tokenEgress.close }
}

/** The overload manager, with the memory limit it watches (logged once: the operator sees what it protects). */
function createOverload (config: Config, deps: AppDependencies, metrics: Metrics): OverloadManager {
  const { log, clock = systemClock, readSystemFile, readLiveBytes, readPrivateBytes, collectGarbage, collectYoungGarbage } = deps
  const limit = memoryLimit(config.memoryLimitBytes, readSystemFile)
  log.info({ memoryLimitBytes: limit.bytes, source: limit.source, file: limit.file, maxInFlightRequests: config.maxInFlightRequests, maxConnections: config.maxConnections },
    limit.bytes > 0 ? 'memory limit known: new requests are shed before it' : 'no memory limit known: shedding on MAX_IN_FLIGHT_REQUESTS and MAX_CONNECTIONS only')
  return createOverloadManager({
    limit,
    maxInFlight: config.maxInFlightRequests,
    maxConnections: config.maxConnections,
    clock,
    log: log.child({ component: 'overload' }),
    metrics,
    ...(readLiveBytes === undefined ? {} : { readLiveBytes }),
    readPrivateBytes: readPrivateBytes ?? (() => privateBytesIn(readSystemFile)),
    ...(collectGarbage === undefined ? {} : { collect: collectGarbage }),
    ...(collectYoungGarbage === undefined ? {} : { collectYoung: collectYoungGarbage })
  })
}

/**
 * The quota guard, with its Redis store when RATE_LIMIT_REDIS_URL is set, and the read cache
 * when a rule has cache= (its copies shared in the same Redis).
 */
async function createQuota (config: Config, deps: AppDependencies, metrics: Metrics): Promise<{ quota: QuotaGuard, cache?: ReadCache }> {
  const { log, clock = systemClock, readFile, quotaTiming } = deps
  const rateLimits = config.rateLimits
  const caching = rateLimits.rules.some((rule) => rule.cache !== undefined)
  // ioredis is loaded only when a Redis URL is set (start-up time and memory per pod).
  let fleet: ((onCooldown: (scope: string) => void) => FleetStore) | undefined
  let shared: SharedCache | undefined
  const durable = config.stateDir === undefined || rateLimits.rules.length === 0 ? undefined : keptLedger(config.stateDir, config, clock, log.child({ component: 'quota' }))
  if (rateLimits.redisUrl !== undefined) {
    const [{ createRedisStore, redisKeyPrefix }, { createFleetStore }] = await Promise.all([
      import('./quota/redis-backend.js'), import('./quota/fleet-store.js')])
    const clientId = 'value' in config.clientId
      ? config.clientId.value
      : trimCredential(await (readFile ?? readSecretFile)(config.clientId.file))
    const urlFile = rateLimits.redisUrlFile
    const connection = {
      url: rateLimits.redisUrl,
      timeoutMs: rateLimits.redisTimeoutMs,
      prefix: redisKeyPrefix(config.authUrl, clientId),
      ...(urlFile === undefined ? {} : { currentUrl: () => rereadRedisUrl(urlFile, readSecretFileSync) })
    }
    const redis = createRedisStore({ ...connection, clock })
    // The read cache's connection only when a rule has cache=.
    if (caching && config.cacheRedisMaxBytes > 0) {
      shared = (await import('./cache/redis-cache.js')).createSharedCache({ ...connection, now: () => clock.now(), maxBytes: config.cacheRedisMaxBytes })
    }
    fleet = (onCooldown) => createFleetStore({
      ...(durable === undefined ? {} : { ledger: durable.ledger, memberId: durable.member, resumed: durable.resumed }),
      redis,
      clock,
      log: log.child({ component: 'quota' }),
      metrics,
      rules: rateLimits.rules,
      redisTimeoutMs: rateLimits.redisTimeoutMs,
      fleetFloor: rateLimits.fleetSize,
      ...(quotaTiming === undefined ? {} : { timing: quotaTiming }),
      onCooldown
    })
  }
  const quota = createQuotaGuard({
    config: rateLimits,
    clock,
    log: log.child({ component: 'quota' }),
    metrics,
    ...(fleet === undefined ? {} : { fleet }),
    ...(durable === undefined ? {} : { durable })
  })
  exportBudgets(metrics, rateLimits.rules, (rule) => quota.budget(rule))
  if (!caching) return { quota }
  // lru-cache is loaded only when a rule has cache=.
  const { createReadCache } = await import('./cache/read-cache.js')
  const cache = createReadCache({
    clock,
    log: log.child({ component: 'cache' }),
    metrics,
    maxBytes: rateLimits.cacheMaxBytes,
    entryMaxBytes: rateLimits.cacheEntryMaxBytes,
    fillMs: rateLimits.maxWaitMs + config.upstreamQueueTimeoutMs + config.upstreamTimeoutMs,
    ...(shared === undefined ? {} : { shared })
  })
  return { quota, cache }
}

/** The quota ledger kept in STATE_DIR: an earlier run's sends restored, a writer for this run's. */
function keptLedger (dir: string, config: Config, clock: Clock, log: Logger) {
  const { rules, redisUrl, fleetSize } = config.rateLimits
  const loaded = readLedgerFile(dir)
  const ledger = createLedger(clock)
  // A corrupt file: as spent as this sidecar could spend alone (embedded: the whole budget).
  const capacity = (limit: Limit): number => redisUrl === undefined ? limit.count : fleetSize === 0 ? 0 : Math.floor(limit.count / fleetSize)
  const restored = restoreLedger(ledger, loaded, rules, clock, capacity)
  if (loaded.state === 'corrupt') {
    log.warn({ reason: loaded.reason, held: restored }, 'rate-limit ledger in STATE_DIR unusable: every budget held as spent for one window')
  } else {
    log.info({ restored }, loaded.state === 'missing' ? 'no rate-limit ledger in STATE_DIR yet: a first start here' : 'rate-limit ledger restored from STATE_DIR')
  }
  const resumed = loaded.state === 'loaded' && loaded.member !== ''
  const member = resumed ? loaded.member : newMemberId()
  return { ledger, member, resumed, save: createLedgerWriter(dir, member, ledger, clock).save }
}

interface ProxyParts { tokens: TokenManager, metrics: Metrics, upstream: Upstream, quota: QuotaGuard, overload: OverloadManager, cache?: ReadCache, idempotency?: IdempotencyStage, tracing?: RequestTracing }

/** The proxy listener: Fastify with the callers' limits, the answers Node's parser forces, and the proxy scope. */
async function createProxyServer (config: Config, log: Logger, { tokens, metrics, upstream, quota, overload, cache, idempotency, tracing }: ProxyParts): Promise<FastifyInstance> {
  const proxyLog = log.child({ listener: 'proxy' })
  const proxyServer = Fastify({
    loggerInstance: proxyLog as FastifyBaseLogger,
    // Fastify's own per-request lines are off; proxy.ts writes one access line when ACCESS_LOG is on.
    logController: new LogController({ disableRequestLogging: true }),
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    // Limits on what callers may send (src/config/schema.ts): oversized heads get 431,
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
      const rawPacket = (err as { rawPacket?: unknown }).rawPacket
      const head = Buffer.isBuffer(rawPacket) ? rawPacket : undefined
      const error = err.code === 'HPE_HEADER_OVERFLOW'
        ? headOverflowError(head, config.maxHeaderCount, config.maxHeaderBytes)
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new RequestTimeoutError() : new BadRequestError('the request is not valid HTTP')
      // The head was parsed and an exchange is under way (the body was not valid HTTP, such as
      // an obfuscated Transfer-Encoding): it answers, and counts itself, if nothing went out yet.
      const res = pendingResponse(socket)
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
    metrics.recordExchange(methodLabel(method), statusClass(status), 'completed', 0)
    if (config.accessLog) proxyLog.info({ method, statusCode: status, outcome: 'completed', error: error.code }, 'request')
    sendError(socket, error, metrics)
  }
  // Node hands CONNECT to a 'connect' listener, or drops the connection without a word.
  proxyServer.server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    answerRaw(socket, Buffer.from('CONNECT '), new MethodNotAllowedError('CONNECT'))
  })
  // Tracing (src/tracing/): a server span from the request's first hook; the proxy's parts wrapped.
  if (tracing !== undefined) proxyServer.addHook('onRequest', (request, reply, done) => { tracing.begin(request, reply.raw); done() })
  if (config.maxConnections > 0) gateConnections(proxyServer.server, overload, metrics)
  limitHeaderCount(proxyServer, config.maxHeaderCount)
  continueOnlyWhenAdmitted(proxyServer)
  admitRequests(proxyServer, { overload, metrics, accessLog: config.accessLog, maxHeaderCount: config.maxHeaderCount, maxBodyBytes: config.maxBodyBytes, ...(tracing === undefined ? {} : { traced: tracing.overload }) })
  enforcePolicy(proxyServer, config.policy, metrics, config.accessLog, proxyLog)
  await proxyServer.register(proxy, {
    upstreamUrl: config.upstreamUrl,
    tokens,
    metrics,
    // Traced closest to the pool: a client span per send that reaches it.
    upstream: config.policy.testOrders ? testOrderUpstream(tracing?.wrapUpstream(upstream) ?? upstream, config.upstreamUrl) : (tracing?.wrapUpstream(upstream) ?? upstream),
    accessLog: config.accessLog,
    maxBodyBytes: config.maxBodyBytes,
    quota: tracing?.wrapQuota(quota) ?? quota,
    rateLimitHeaders: config.rateLimitHeaders,
    ...(cache === undefined ? {} : { cache: tracing?.wrapCache(cache) ?? cache }),
    ...(idempotency === undefined ? {} : { idempotency }),
    ...(tracing === undefined ? {} : { tracing })
  })
  return proxyServer
}

/**
 * OpenTelemetry, loaded with a dynamic import() only when an OTLP endpoint is set: with tracing
 * off the sidecar loads none of it (test/tracing/loaded-modules.test.ts).
 */
async function startTracingFor (config: Config, tracingConfig: TracingConfig, metrics: Metrics, version: string): Promise<Tracing> {
  const { startTracing } = await import('./tracing/index.js')
  const route = routeFor(config.upstreamUrl, config.egressProxy)
  const tracing = startTracing(tracingConfig, {
    metrics, version, upstreamUrl: config.upstreamUrl, egressRoute: route.via === 'direct' ? `direct (${route.why})` : `proxy ${route.proxy.display}`
  })
  logTraceFields(tracing.requests.logFields)
  return tracing
}
