#!/usr/bin/env node
// The entry point, and the only file that reads process.env or listens.
//
//   node dist/main.js                 the sidecar
//   node dist/main.js check-config    validate the configuration and exit
//   node dist/main.js demo            the stand-in TI APIs and the sidecar in front of them
//   node dist/main.js stand-in        the stand-in TI APIs alone (docker-compose)
//   node dist/main.js caller          the example caller service (docker-compose)
//   node dist/main.js healthcheck [url]  exit 0 if the URL (default: this sidecar's /readyz) answers 200
//
// Only light modules are imported here. fastify, undici and pino are imported by the
// commands that use them: a container runtime runs `healthcheck` every few seconds, and
// loading the whole stack would cost each check some 0.4 s of CPU and 75 MiB.
import closeWithGrace from 'close-with-grace'
import type { Logger } from 'pino'
import type { App } from './app.js'
import { systemClock } from './clock.js'
import {
  ConfigError, DEFAULT_ADMIN_PORT, DEMO_CLIENT_ID, DEMO_CLIENT_SECRET, loadCallerConfig, loadConfig, loadStandInConfig,
  type Config, type LogLevel
} from './config.js'
import { answersOk } from './healthcheck.js'

type Env = Record<string, string | undefined>

function configOrExit<T> (load: () => T): T {
  try {
    return load()
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    // One message naming every bad variable; no stack trace, never a value.
    process.stderr.write(`store-auth-proxy: ${err.message}\n`)
    process.exit(1)
  }
}

/** What is safe to print about a config: never a credential. */
function describe (config: Config) {
  return {
    authUrl: config.authUrl,
    upstreamUrl: config.upstreamUrl,
    clientIdFrom: 'file' in config.clientId ? `file ${config.clientId.file}` : 'environment',
    clientSecretFrom: 'file' in config.clientSecret ? `file ${config.clientSecret.file}` : 'environment',
    proxy: `${config.host}:${config.port}`,
    admin: `${config.adminHost}:${config.adminPort}`
  }
}

async function loadLogger (level: LogLevel): Promise<Logger> {
  const { createLogger } = await import('./logger.js')
  return createLogger(level)
}

async function serve (config: Config, log: Logger): Promise<App> {
  const { buildApp } = await import('./app.js')
  const app = await buildApp(config, { log })
  void app.start()
  await app.admin.listen({ host: config.adminHost, port: config.adminPort })
  await app.proxy.listen({ host: config.host, port: config.port })
  log.info(describe(config), 'store-auth-proxy started')

  closeWithGrace({ delay: config.shutdownDelayMs + config.shutdownGraceMs, logger: log }, async ({ signal, err }) => {
    if (err !== undefined) log.error({ err }, 'fatal error, shutting down')
    log.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down: not ready, finishing in-flight requests')
    app.drain()
    // A plain (non-native) sidecar gets SIGTERM together with its app: keep serving
    // for SHUTDOWN_DELAY_MS so the app can finish work that still calls the store API.
    if (config.shutdownDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs))
    await app.close()
    log.info('stopped')
  })
  return app
}

async function main (command: string, env: Env): Promise<void> {
  switch (command) {
    case 'serve': {
      const config = configOrExit(() => loadConfig(env))
      await serve(config, await loadLogger(config.logLevel))
      return
    }
    case 'check-config': {
      const config = configOrExit(() => loadConfig(env))
      process.stdout.write(`configuration is valid: ${JSON.stringify(describe(config))}\n`)
      return
    }
    case 'stand-in': {
      const standIn = configOrExit(() => loadStandInConfig(env))
      const log = await loadLogger(standIn.logLevel)
      const { createStandIn } = await import('./demo/stand-in.js')
      const { app } = createStandIn({ ...standIn, logger: log.child({ component: 'stand-in' }) })
      await app.listen({ host: standIn.host, port: standIn.port })
      closeWithGrace({ delay: 5000, logger: log }, async () => { await app.close() })
      return
    }
    case 'demo': {
      const standIn = configOrExit(() => loadStandInConfig(env))
      const log = await loadLogger(standIn.logLevel)
      const { createStandIn } = await import('./demo/stand-in.js')
      const { app: stand } = createStandIn({
        ...standIn, clientId: DEMO_CLIENT_ID, clientSecret: DEMO_CLIENT_SECRET, logger: log.child({ component: 'stand-in' })
      })
      await stand.listen({ host: '127.0.0.1', port: standIn.port })
      const standInUrl = `http://127.0.0.1:${standIn.port}`
      const config = configOrExit(() => loadConfig({
        AUTH_URL: standInUrl,
        UPSTREAM_URL: standInUrl,
        CLIENT_ID: DEMO_CLIENT_ID,
        CLIENT_SECRET: DEMO_CLIENT_SECRET,
        PORT: env.PORT,
        ADMIN_HOST: env.ADMIN_HOST ?? '127.0.0.1',
        ADMIN_PORT: env.ADMIN_PORT,
        ACCESS_LOG: env.ACCESS_LOG ?? 'true',
        LOG_LEVEL: env.LOG_LEVEL
      }))
      await serve(config, log)
      process.stdout.write(demoHelp(config, standInUrl))
      return
    }
    case 'caller': {
      const config = configOrExit(() => loadCallerConfig(env))
      // Unlike the sidecar's, the caller's timer is what keeps its process alive.
      const clock = {
        ...systemClock,
        setTimer: (fn: () => void, ms: number) => { const timer = setTimeout(fn, ms); return () => { clearTimeout(timer) } }
      }
      const { createCaller } = await import('./demo/caller.js')
      const caller = createCaller({ ...config, log: (await loadLogger(config.logLevel)).child({ component: 'caller' }), clock })
      caller.start()
      closeWithGrace({ delay: 2000 }, async () => { caller.stop() })
      return
    }
    case 'healthcheck': {
      // For container HEALTHCHECKs: needs no shell and no curl, only node.
      const host = env.ADMIN_HOST === undefined || env.ADMIN_HOST === '0.0.0.0' || env.ADMIN_HOST === '::' ? '127.0.0.1' : env.ADMIN_HOST
      const url = process.argv[3] ?? `http://${host.includes(':') ? `[${host}]` : host}:${env.ADMIN_PORT ?? DEFAULT_ADMIN_PORT}/readyz`
      process.exit(await answersOk(url, 3000) ? 0 : 1)
    }
    // eslint-disable-next-line no-fallthrough -- process.exit above never returns
    default:
      process.stderr.write(`store-auth-proxy: unknown command "${command}" (serve, check-config, demo, stand-in, caller, healthcheck)\n`)
      process.exit(2)
  }
}

function demoHelp (config: Config, standInUrl: string): string {
  const proxy = `http://localhost:${config.port}`
  const admin = `http://localhost:${config.adminPort}`
  return `
  store-auth-proxy demo: the stand-in TI APIs listen on ${standInUrl},
  the sidecar on ${proxy} (no credentials needed) and its admin port on ${admin}.

  Try:
    curl '${proxy}/v2/store/products/LM358BIDR?currency=USD'
    curl '${proxy}/v2/store/products?currency=EUR'
    curl -X POST ${proxy}/v2/store/orders -H 'content-type: application/json' \\
         -d '{"lineItems":[{"tiPartNumber":"LM358BIDR","quantity":10}]}'
    curl -i '${standInUrl}/v2/store/products/LM358BIDR'     # straight to the API: 401, no token
    curl ${admin}/readyz
    curl -s ${admin}/metrics | grep '^store_auth_proxy_'

  Ctrl-C stops it.

`
}

await main(process.argv[2] ?? 'serve', process.env)
