// The admin listener: /livez, /readyz, /status, /metrics for the kubelet, Prometheus and
// operators. It listens on the pod network without credentials, so it is bounded on its own:
// a few connections, short timeouts, small heads. A flood on it is answered and closed without
// touching the proxy port's bounds, and neither that flood nor the proxy port shedding fails a
// probe (a kubelet that cannot reach /livez restarts a healthy pod): beyond the bound, a
// connection whose first read is a whole head is still served, then closed.
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { HeadersTooLargeError, RequestTimeoutError, BadRequestError, sendError } from '../http/errors.js'
import type { Metrics } from '../metrics.js'
import { boundedCount, gateConnections } from '../overload/connection-gate.js'
import { adminRoutes, type AdminOptions } from './routes.js'

/** A probe or a scrape sends its head at once: a head still unfinished after this is cut (408). */
export const ADMIN_HEADERS_TIMEOUT_MS = 5_000
/** A whole admin request (they have no body) within this. */
export const ADMIN_REQUEST_TIMEOUT_MS = 10_000
/** Prometheus and the kubelet reconnect for each scrape or probe at worst: idle keep-alives go soon. */
export const ADMIN_KEEP_ALIVE_TIMEOUT_MS = 5_000
/** A connection silent both ways this long is closed (a peer that stopped reading /metrics). */
export const ADMIN_IDLE_TIMEOUT_MS = 30_000
/** How often Node checks those timeouts (its default, 30 s, would let a slow head live 35 s). */
export const ADMIN_CONNECTIONS_CHECK_MS = 1_000
/** A probe's head is a few hundred bytes: 8 KiB leaves room for proxies' headers, and bounds what a slow one holds. */
export const ADMIN_MAX_HEADER_BYTES = 8 * 1024
/** Header fields an admin request may carry; Node drops those beyond (nothing here reads them). */
export const ADMIN_MAX_HEADER_COUNT = 64
/** A connection beyond ADMIN_MAX_CONNECTIONS that sends nothing this long gets its 503 (connection-gate.ts WholeHeadLane). */
export const ADMIN_FIRST_READ_MS = 1_000

export interface AdminServerOptions {
  log: Logger
  metrics: Metrics
  /** ADMIN_MAX_CONNECTIONS. */
  maxConnections: number
  routes: AdminOptions
}

/** The admin listener, its bounds and routes. Never listens: serve.ts and the tests do. */
export async function createAdminServer ({ log, metrics, maxConnections, routes }: AdminServerOptions): Promise<FastifyInstance> {
  const adminLog = log.child({ listener: 'admin' })
  const admin = Fastify({
    loggerInstance: adminLog as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    forceCloseConnections: true,
    http: {
      maxHeaderSize: ADMIN_MAX_HEADER_BYTES,
      headersTimeout: ADMIN_HEADERS_TIMEOUT_MS,
      connectionsCheckingInterval: ADMIN_CONNECTIONS_CHECK_MS
    },
    requestTimeout: ADMIN_REQUEST_TIMEOUT_MS,
    keepAliveTimeout: ADMIN_KEEP_ALIVE_TIMEOUT_MS,
    connectionTimeout: ADMIN_IDLE_TIMEOUT_MS,
    clientErrorHandler (err, socket) {
      if (err.code === 'ECONNRESET' || socket.destroyed || !socket.writable) {
        socket.destroy()
        return
      }
      sendError(socket, err.code === 'HPE_HEADER_OVERFLOW'
        ? new HeadersTooLargeError(ADMIN_MAX_HEADER_BYTES)
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? new RequestTimeoutError() : new BadRequestError('the request is not valid HTTP'), metrics)
      socket.destroySoon()
    }
  })
  admin.server.maxHeadersCount = ADMIN_MAX_HEADER_COUNT
  const shed = metrics.overloadShed.labels('admin_connections')
  shed.inc(0)
  const count = boundedCount(maxConnections, () => { shed.inc() }, (shedding) => {
    if (shedding) adminLog.warn({ maxConnections }, 'admin listener at ADMIN_MAX_CONNECTIONS: new connections without a whole head in their first read get 503 OVERLOADED and are closed')
    else adminLog.info({ maxConnections }, 'admin listener below ADMIN_MAX_CONNECTIONS again')
  })
  // A probe beyond the bound is still answered: a flood of unfinished heads holding every slot must not fail the kubelet's probes.
  gateConnections(admin.server, count, metrics, { max: maxConnections, firstReadMs: ADMIN_FIRST_READ_MS })
  await admin.register(adminRoutes, routes)
  return admin
}
