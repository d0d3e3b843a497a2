// The sidecar's commands: `serve` (listen, then shut down gracefully) and what it prints.
import { egressSummary } from '../egress/route.js'
import { describePolicy } from '../config/orders.js'
import closeWithGrace from 'close-with-grace'
import type { Logger } from 'pino'
import type { App } from '../app.js'
import type { Config } from '../config/load.js'
import type { Env } from '../config/parse-env.js'
import { ADMIN_BACKLOG, proxyBacklog } from '../overload/manager.js'
import { redisDisplayUrl } from '../config/rate-limits.js'
import { buildInfo } from '../config/build-info.js'
import { cachedWaitWarnings, plainHttpWarnings } from '../config/warnings.js'
import { configOrExit, listenOrExit } from './exit.js'
import { loadUndici } from './undici-globals.js'
import { returnMemoryWhenIdle } from '../overload/idle-memory.js'
import { systemClock } from '../clock.js'

/** The sidecar's configuration, loaded on demand: it imports the token client, and with it undici. */
export async function loadSidecarConfig (env: Env): Promise<Config> {
  await loadUndici()
  const { loadConfig } = await import('../config/load.js')
  return configOrExit(() => loadConfig(env))
}

/** What is safe to print about a config: never a credential. */
export function describe (config: Config) {
  return {
    authUrl: config.token.authUrl,
    upstreamUrl: config.upstream.url,
    // scheme://host:port only: an egress proxy URL may carry a password.
    egressProxy: egressSummary(config.egress, config),
    clientIdFrom: 'file' in config.token.clientId ? `file ${config.token.clientId.file}` : 'environment',
    clientSecretFrom: 'file' in config.token.clientSecret ? `file ${config.token.clientSecret.file}` : 'environment',
    proxy: `${config.listener.host}:${config.listener.port}`,
    admin: `${config.admin.host}:${config.admin.port}`,
    rateLimitRules: config.rateLimits.rules.length,
    // scheme://host:port only: the URL may carry a password.
    rateLimitRedis: config.rateLimits.redisUrl === undefined ? null : redisDisplayUrl(config.rateLimits.redisUrl),
    routePolicy: describePolicy(config.policy)
  }
}

export async function serve (config: Config, log: Logger): Promise<App> {
  const { buildApp } = await import('../app.js')
  const app = await buildApp(config, { log, version: buildInfo().version })
  // The process's memory, not the app's (tests run many apps in one process): here, not in buildApp.
  const idleMemory = returnMemoryWhenIdle({
    clock: systemClock,
    inFlight: () => app.overload.status().inFlight,
    collected: (heapBytes) => {
      app.metrics.idleCollections.inc()
      log.debug({ heapBytes }, 'quiet: a memory-reducing collection returned what V8 held beyond its heap in use')
    }
  })
  const started = app.start()
  await listenOrExit(app.admin, { host: 'ADMIN_HOST', port: 'ADMIN_PORT' }, config.admin.host, config.admin.port, ADMIN_BACKLOG)
  await listenOrExit(app.proxy, { host: 'HOST', port: 'PORT' }, config.listener.host, config.listener.port, proxyBacklog(config.overload.maxConnections))
  log.info({ ...buildInfo(), ...describe(config) }, 'store-auth-proxy started')
  for (const warning of [...plainHttpWarnings(config), ...cachedWaitWarnings(config)]) log.warn(warning)
  // Once listening and the first token request has ended (held or failed): start-up's own work is then out of the first check's window.
  void started.finally(() => { idleMemory.start() })

  closeWithGrace({ delay: config.shutdown.delayMs + config.shutdown.graceMs, logger: log }, async ({ signal, err }) => {
    if (err !== undefined) log.error({ err }, 'fatal error, shutting down')
    log.info({ signal, graceMs: config.shutdown.graceMs }, 'shutting down: not ready, finishing in-flight requests')
    app.drain()
    // A plain (non-native) sidecar gets SIGTERM together with its app: keep serving
    // for SHUTDOWN_DELAY_MS so the app can finish work that still calls the store API.
    if (config.shutdown.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, config.shutdown.delayMs))
    idleMemory.stop()
    await app.close()
    log.info('stopped')
  })
  return app
}
