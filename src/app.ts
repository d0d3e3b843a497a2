import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import type { Dispatcher } from 'undici'
import { createAdminServer } from './admin/server.js'
import { idempotencyReleaseRoute } from './admin/idempotency-release.js'
import { systemClock, type Clock } from './clock.js'
import type { Config, OverloadConfig, TokenConfig } from './config/load.js'
import type { EgressProxy } from './config/egress-proxy.js'
import { egressDispatcher } from './egress/connection.js'
import { routeFor } from './egress/route.js'
import { createUpstream } from './upstream/forward.js'
import { memoryLimit, readPrivateBytes as privateBytesIn, type MemoryLimit, type ReadSystemFile } from './overload/memory-limit.js'
import { createMetrics, type Metrics } from './metrics.js'
import { createOverloadManager, type OverloadManager } from './overload/manager.js'
import { limitWarnings, type LimitSettings } from './overload/limit-warnings.js'
import { headCost, headsBoundNote } from './overload/waters.js'
import { createProxyServer } from './proxy/server.js'
import { createQuota, type QuotaDependencies } from './quota/create.js'
import type { QuotaGuard } from './quota/guard.js'
import type { TracingConfig } from './config/tracing.js'
import type { Tracing } from './tracing/index.js'
import { logTraceFields } from './logger.js'
import { configSummary } from './admin/status.js'
import { createCredentialReader, credentialOrigin, type ReadFile } from './token/credentials.js'
import { createTokenClient, tokenEndpointUrl } from './token/token-client.js'
import { createTokenManager, type TokenManager } from './token/token-manager.js'
import { createIdempotency, type IdempotencyTiming } from './idempotency/create.js'

/** Connections kept to the upstream; requests beyond them queue rather than open more. */
export const UPSTREAM_CONNECTIONS = 128
export const UPSTREAM_CONNECT_TIMEOUT_MS = 10_000
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
  quotaTiming?: QuotaDependencies['quotaTiming']
  /** The idempotency keys' epoch check, recovery window and pending margin (src/idempotency/create.ts); tests shorten them. */
  idempotencyTiming?: IdempotencyTiming
  /** How the overload manager reads memory and collects garbage; tests give their own. */
  memory?: MemoryProbes
}

export interface MemoryProbes {
  /** Where the cgroup's memory limit is read from (memory-limit.ts); tests give fixture files. */
  readSystemFile?: ReadSystemFile
  /** Live memory (memory-watch.ts liveBytes by default). */
  readLiveBytes?: () => number
  /** Private memory, undefined when unknown (memory-limit.ts readPrivateBytes by default). */
  readPrivateBytes?: () => number | undefined
  /** A full garbage collection (memory-watch.ts fullCollection by default). */
  collectGarbage?: () => void
  /** A young-generation collection, paced by the bodies of shed requests (memory-watch.ts youngCollection by default). */
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
  const { tokens, closeTokenEgress } = createTokens(config.token, config.egress, deps, metrics)

  // One keep-alive pool to the upstream origin, TLS verified, with a bounded queue.
  const upstream = createUpstream({
    url: config.upstream.url,
    connections: UPSTREAM_CONNECTIONS,
    connectTimeoutMs: Math.min(UPSTREAM_CONNECT_TIMEOUT_MS, config.upstream.timeoutMs),
    timeoutMs: config.upstream.timeoutMs,
    queueLimit: config.upstream.queueLimit,
    queueTimeoutMs: config.upstream.queueTimeoutMs,
    queueGauge: metrics.upstreamQueued,
    route: routeFor(config.upstream.url, config.egress)
  })

  const limit = memoryLimit(config.overload.memoryLimitBytes, deps.memory?.readSystemFile)
  const { quota, cache } = await createQuota(config, { ...deps, memoryLimitBytes: limit.bytes }, metrics)
  const overload = createOverload(config, { limit, ...(cache === undefined ? {} : { giveWay: cache.giveWay }) }, deps, metrics)
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
    maxConnections: config.admin.maxConnections,
    routes: {
      tokens, metrics, quota, overload, ...(cache === undefined ? {} : { cache }), ...(idempotency === undefined ? {} : { idempotency }), isDraining: () => draining, version, config: configSummary(config), statusEndpoint: config.admin.statusEndpoint, statusFrom: config.admin.statusFrom, ...(clock === undefined ? {} : { clock })
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
function createTokens (token: TokenConfig, egress: EgressProxy, deps: AppDependencies, metrics: Metrics): { tokens: TokenManager, closeTokenEgress: () => Promise<void> } {
  const { log, clock, random, readFile, tokenDispatcher } = deps
  // The token endpoint goes through the egress proxy, or direct (egress/route.ts), on a pool of
  // the sidecar's own either way: never undici's global dispatcher, which NODE_USE_ENV_PROXY or
  // another module may have replaced, so the route /status shows is the route taken.
  const tokenRoute = routeFor(token.authUrl, egress)
  const tokenEgress = tokenDispatcher === undefined
    ? egressDispatcher(token.authUrl, tokenRoute, { connectTimeoutMs: Math.min(UPSTREAM_CONNECT_TIMEOUT_MS, token.timeoutMs) })
    : { dispatcher: tokenDispatcher, close: async () => {} }
  const fetchToken = createTokenClient({
    authUrl: token.authUrl,
    timeoutMs: token.timeoutMs,
    credentials: createCredentialReader(token.clientId, token.clientSecret, readFile),
    dispatcher: tokenEgress.dispatcher
  })
  const tokens = createTokenManager({
    fetchToken,
    log: log.child({ component: 'token' }),
    metrics,
    refreshMarginMs: token.refreshMarginMs,
    waitMs: token.waitMs,
    tokenUrl: tokenEndpointUrl(token.authUrl),
    credentials: { clientId: credentialOrigin('CLIENT_ID', token.clientId), clientSecret: credentialOrigin('CLIENT_SECRET', token.clientSecret) },
    ...(clock === undefined ? {} : { clock }),
    ...(random === undefined ? {} : { random })
  })
  return { tokens, closeTokenEgress: tokenEgress.close }
}

/**
 * The overload manager, with the memory limit it watches (logged once: the operator sees what
 * it protects) and what gives way before it sheds (the read cache).
 */
function createOverload (settings: LimitSettings & { readonly overload: OverloadConfig },
  { limit, giveWay }: { limit: MemoryLimit, giveWay?: (bytes: number) => number }, deps: AppDependencies, metrics: Metrics): OverloadManager {
  const { log, clock = systemClock } = deps
  const { overload, listener: { maxHeaderBytes, maxHeaderCount } } = settings
  const { readSystemFile, readLiveBytes, readPrivateBytes, collectGarbage, collectYoungGarbage } = deps.memory ?? {}
  log.info({ memoryLimitBytes: limit.bytes, source: limit.source, file: limit.file, ...(limit.settingAbove === undefined ? {} : { memoryLimitSetting: limit.settingAbove }), maxInFlightRequests: overload.maxInFlightRequests, maxConnections: overload.maxConnections, maxUnfinishedHeads: headsBoundNote(limit.bytes, headCost(maxHeaderBytes, maxHeaderCount)) },
    limit.bytes > 0 ? 'memory limit known: new requests are shed before it' : 'no memory limit known: shedding on MAX_IN_FLIGHT_REQUESTS and MAX_CONNECTIONS only')
  for (const warning of limitWarnings(settings, limit)) log.warn(warning)
  return createOverloadManager({
    limit,
    maxInFlight: overload.maxInFlightRequests,
    maxConnections: overload.maxConnections,
    clock,
    log: log.child({ component: 'overload' }),
    metrics,
    ...(readLiveBytes === undefined ? {} : { readLiveBytes }),
    readPrivateBytes: readPrivateBytes ?? (() => privateBytesIn(readSystemFile)),
    ...(collectGarbage === undefined ? {} : { collect: collectGarbage }),
    ...(collectYoungGarbage === undefined ? {} : { collectYoung: collectYoungGarbage }),
    ...(giveWay === undefined ? {} : { giveWay })
  })
}

/**
 * OpenTelemetry, loaded with a dynamic import() only when an OTLP endpoint is set: with tracing
 * off the sidecar loads none of it (test/tracing/loaded-modules.test.ts).
 */
async function startTracingFor (config: Config, tracingConfig: TracingConfig, metrics: Metrics, version: string): Promise<Tracing> {
  const { startTracing } = await import('./tracing/index.js')
  const route = routeFor(config.upstream.url, config.egress)
  const tracing = startTracing(tracingConfig, {
    metrics, version, upstreamUrl: config.upstream.url, egressRoute: route.via === 'direct' ? `direct (${route.why})` : `proxy ${route.proxy.display}`
  })
  logTraceFields(tracing.requests.logFields)
  return tracing
}
