// The demo commands: `stand-in` and `caller` (docker-compose's services) and `demo`
// (both sides on this machine), with their help.
import type { AddressInfo } from 'node:net'
import closeWithGrace from 'close-with-grace'
import type { Command } from '../cli/command.js'
import { configOrExit, listenOrExit, loadLogger } from '../cli/exit.js'
import { loadSidecarConfig, serve } from '../cli/serve.js'
import { systemClock } from '../clock.js'
import type { Env } from '../config/parse-env.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET, loadCallerConfig, loadStandInConfig } from './config.js'
import { DEMO_RATE_LIMITS, formatTour } from './tour.js'

export const DEMO_COMMANDS: Record<string, Command> = {
  demo: {
    maxArgs: 0,
    summary: 'the stand-in TI APIs and the sidecar in front of them, on this machine (npm run demo)',
    details: `Starts, in one process, the stand-in TI OAuth and store APIs on 127.0.0.1:$STAND_IN_PORT
(default 8081) with demo credentials, and the sidecar in front of them on PORT and
ADMIN_PORT (admin on 127.0.0.1), with budgets and a cached catalog (RATE_LIMITS set by the
demo). Prints a tour: commands to try, each with what to look for. Ctrl-C stops it.`
  },
  'stand-in': {
    maxArgs: 0,
    summary: 'the stand-in TI OAuth and store APIs alone (docker-compose)',
    details: `Listens on STAND_IN_HOST:STAND_IN_PORT (default 127.0.0.1:8081). Other variables:
STAND_IN_CLIENT_ID, STAND_IN_CLIENT_SECRET or STAND_IN_CLIENT_SECRET_FILE,
STAND_IN_TOKEN_LIFETIME_MS, STAND_IN_STYLE (ti or apigee), LOG_LEVEL, LOG_FORMAT.`
  },
  caller: {
    maxArgs: 0,
    summary: 'the example caller service: calls the store API through the sidecar (docker-compose)',
    details: `Every CALLER_INTERVAL_MS (default 5000) calls CALLER_TARGET_URL (default
http://localhost:8080/v2/store/products/LM358BIDR?currency=USD), with CALLER_TIMEOUT_MS, and
logs the answer.`
  }
}

const STAND_IN_LISTENER = { host: 'STAND_IN_HOST', port: 'STAND_IN_PORT' }

/** Runs one of DEMO_COMMANDS. */
export async function runDemoCommand (name: string, env: Env): Promise<void> {
  if (name === 'stand-in') await runStandIn(env)
  else if (name === 'demo') await runDemo(env)
  else if (name === 'caller') await runCaller(env)
}

async function runStandIn (env: Env): Promise<void> {
  const standIn = configOrExit(() => loadStandInConfig(env))
  const log = await loadLogger(standIn.logLevel, standIn.logFormat)
  const { createStandIn } = await import('./stand-in.js')
  const { app } = createStandIn({ ...standIn, logger: log.child({ component: 'stand-in' }) })
  await listenOrExit(app, STAND_IN_LISTENER, standIn.host, standIn.port)
  closeWithGrace({ delay: 5000, logger: log }, async () => { await app.close() })
}

async function runDemo (env: Env): Promise<void> {
  const standIn = configOrExit(() => loadStandInConfig(env))
  const log = await loadLogger(standIn.logLevel, standIn.logFormat)
  const { createStandIn } = await import('./stand-in.js')
  const { app: stand } = createStandIn({
    ...standIn, clientId: DEMO_CLIENT_ID, clientSecret: DEMO_CLIENT_SECRET, logger: log.child({ component: 'stand-in' })
  })
  await listenOrExit(stand, STAND_IN_LISTENER, '127.0.0.1', standIn.port)
  const standInUrl = `http://127.0.0.1:${portOf(stand.server)}`
  const config = await loadSidecarConfig({
    AUTH_URL: standInUrl,
    UPSTREAM_URL: standInUrl,
    CLIENT_ID: DEMO_CLIENT_ID,
    CLIENT_SECRET: DEMO_CLIENT_SECRET,
    PORT: env.PORT,
    ADMIN_HOST: env.ADMIN_HOST ?? '127.0.0.1',
    ADMIN_PORT: env.ADMIN_PORT,
    ACCESS_LOG: env.ACCESS_LOG ?? 'true',
    RATE_LIMITS: DEMO_RATE_LIMITS,
    LOG_LEVEL: env.LOG_LEVEL,
    LOG_FORMAT: env.LOG_FORMAT
  })
  const app = await serve(config, log)
  // The ports listened on (PORT=0 and friends pick free ones), so every command works as printed.
  process.stdout.write(formatTour({
    proxy: `http://localhost:${portOf(app.proxy.server)}`,
    admin: `http://localhost:${portOf(app.admin.server)}`,
    standIn: standInUrl
  }))
}

function portOf (server: { address: () => string | AddressInfo | null }): number {
  const address = server.address()
  return typeof address === 'object' && address !== null ? address.port : 0
}

async function runCaller (env: Env): Promise<void> {
  const config = configOrExit(() => loadCallerConfig(env))
  // Unlike the sidecar's, the caller's timer is what keeps its process alive.
  const clock = {
    ...systemClock,
    setTimer: (fn: () => void, ms: number) => { const timer = setTimeout(fn, ms); return () => { clearTimeout(timer) } }
  }
  const { createCaller } = await import('./caller.js')
  const caller = createCaller({ ...config, log: (await loadLogger(config.logLevel, config.logFormat)).child({ component: 'caller' }), clock })
  caller.start()
  closeWithGrace({ delay: 2000 }, async () => { caller.stop() })
}
