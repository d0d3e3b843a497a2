// The demo commands: `stand-in` and `caller` (docker-compose's services) and `demo`
// (both sides on this machine); their help is in command-table.ts, which main.ts reads
// without loading this file.
import type { AddressInfo } from 'node:net'
import closeWithGrace from 'close-with-grace'
import { configOrExit, listenOrExit, loadLogger } from '../cli/exit.js'
import { loadSidecarConfig, serve } from '../cli/serve.js'
import { systemClock } from '../clock.js'
import type { Env } from '../config/parse-env.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET, loadCallerConfig, loadStandInConfig } from './config.js'
import { DEMO_RATE_LIMITS, formatTour } from './tour.js'

const STAND_IN_LISTENER = { host: 'STAND_IN_HOST', port: 'STAND_IN_PORT' }

/** Runs one of DEMO_COMMANDS (command-table.ts). */
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
