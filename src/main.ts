#!/usr/bin/env node
// The entry point, and the only file that reads process.env or listens. `--help` lists
// the commands (COMMANDS below); the README's "Command line" section mirrors it.
//
// Only light modules are imported here. fastify, undici and pino are imported by the
// commands that use them: a container runtime runs `healthcheck` every few seconds, and
// loading the whole stack would cost each check some 0.4 s of CPU and 75 MiB.
import closeWithGrace from 'close-with-grace'
import type { Logger } from 'pino'
import type { App } from './app.js'
import { systemClock } from './clock.js'
import {
  ConfigError, DEFAULT_ADMIN_PORT, DEMO_CLIENT_ID, DEMO_CLIENT_SECRET, listenFailure, loadCallerConfig, loadConfig,
  loadStandInConfig, redisDisplayUrl, type Config, type LogLevel
} from './config.js'
import { egressSummary } from './egress-proxy.js'
import { probe } from './healthcheck.js'
import { buildInfo } from './version.js'

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
    // scheme://host:port only: a proxy URL may carry a password.
    egressProxy: egressSummary(config.egressProxy, config),
    clientIdFrom: 'file' in config.clientId ? `file ${config.clientId.file}` : 'environment',
    clientSecretFrom: 'file' in config.clientSecret ? `file ${config.clientSecret.file}` : 'environment',
    proxy: `${config.host}:${config.port}`,
    admin: `${config.adminHost}:${config.adminPort}`,
    rateLimitRules: config.rateLimits.rules.length,
    // scheme://host:port only: the URL may carry a password.
    rateLimitRedis: config.rateLimits.redisUrl === undefined ? null : redisDisplayUrl(config.rateLimits.redisUrl)
  }
}

interface Listener { listen: (options: { host: string, port: number }) => Promise<unknown> }

/**
 * Listens, or exits 1 with one line naming the variables that chose the address
 * (EADDRINUSE, EACCES, an address not of this machine, a host that does not resolve):
 * an operator's error, not a crash, so no stack trace.
 */
async function listenOrExit (server: Listener, names: { host: string, port: string }, host: string, port: number): Promise<void> {
  try {
    await server.listen({ host, port })
  } catch (err) {
    process.stderr.write(`store-auth-proxy: ${listenFailure(names, host, port, err)}\n`)
    process.exit(1)
  }
}

async function loadLogger (level: LogLevel): Promise<Logger> {
  const { createLogger } = await import('./logger.js')
  return createLogger(level)
}

async function serve (config: Config, log: Logger): Promise<App> {
  const { buildApp } = await import('./app.js')
  const app = await buildApp(config, { log, version: buildInfo().version })
  void app.start()
  await listenOrExit(app.admin, { host: 'ADMIN_HOST', port: 'ADMIN_PORT' }, config.adminHost, config.adminPort)
  await listenOrExit(app.proxy, { host: 'HOST', port: 'PORT' }, config.host, config.port)
  log.info({ ...buildInfo(), ...describe(config) }, 'store-auth-proxy started')

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

const STAND_IN_LISTENER = { host: 'STAND_IN_HOST', port: 'STAND_IN_PORT' }

async function main (command: string, args: string[], env: Env): Promise<void> {
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
      await listenOrExit(app, STAND_IN_LISTENER, standIn.host, standIn.port)
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
      await listenOrExit(stand, STAND_IN_LISTENER, '127.0.0.1', standIn.port)
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
      const url = args[0] ?? `http://${host.includes(':') ? `[${host}]` : host}:${env.ADMIN_PORT ?? DEFAULT_ADMIN_PORT}/readyz`
      const result = await probe(url, HEALTHCHECK_TIMEOUT_MS)
      // One line either way: `docker inspect` and `docker exec ... healthcheck` show it.
      if (result.ok) process.stdout.write(`healthy: ${result.message}\n`)
      else process.stderr.write(`not healthy: ${result.message}\n`)
      process.exit(result.ok ? 0 : 1)
    }
  }
}

const HEALTHCHECK_TIMEOUT_MS = 3000

// --- the command line -------------------------------------------------------------------

interface Command {
  /** Positional arguments, for the usage line. */
  readonly args?: string
  readonly maxArgs: number
  readonly summary: string
  readonly details: string
}

const CONFIG_POINTER = 'Configuration comes from environment variables only: see the "Configuration" table in README.md.'

const COMMANDS: Record<string, Command> = {
  serve: {
    maxArgs: 0,
    summary: 'run the sidecar (the default when no command is given)',
    details: `Runs the sidecar: the proxy on HOST:PORT (default 127.0.0.1:8080) and /livez, /readyz,
/metrics on ADMIN_HOST:ADMIN_PORT (default 0.0.0.0:9090). Needs AUTH_URL, UPSTREAM_URL,
CLIENT_ID or CLIENT_ID_FILE, CLIENT_SECRET or CLIENT_SECRET_FILE. SIGTERM or SIGINT: stop
being ready, finish in-flight requests (SHUTDOWN_GRACE_MS), exit 0.
Exits 1 on a bad configuration or a port it cannot listen on, with one line saying why.`
  },
  'check-config': {
    maxArgs: 0,
    summary: 'validate the configuration, print it without credentials, and exit (0 valid, 1 not)',
    details: `Checks every variable the sidecar reads, as serve would, without listening or asking
for a token: every problem is named at once, never a credential's value. Also checks what
can be seen without listening, such as PORT equal to ADMIN_PORT on overlapping addresses.`
  },
  healthcheck: {
    args: '[URL]',
    maxArgs: 1,
    summary: 'exit 0 if URL (default: this sidecar\'s admin /readyz) answers 2xx, else 1 and why',
    details: `For container HEALTHCHECKs: needs only node (no shell, no curl). Asks URL, by default
http://127.0.0.1:$ADMIN_PORT/readyz (ADMIN_HOST when it is not a wildcard), with a 3 s
limit, and prints one line: what answered, or what failed (refused, timeout, the status and
the /readyz reason). Exit 0 for a 2xx answer, 1 otherwise.`
  },
  demo: {
    maxArgs: 0,
    summary: 'the stand-in TI APIs and the sidecar in front of them, on this machine (npm run demo)',
    details: `Starts, in one process, the stand-in TI OAuth and store APIs on 127.0.0.1:$STAND_IN_PORT
(default 8081) with demo credentials, and the sidecar in front of them on PORT and
ADMIN_PORT (admin on 127.0.0.1). Prints commands to try. Ctrl-C stops it.`
  },
  'stand-in': {
    maxArgs: 0,
    summary: 'the stand-in TI OAuth and store APIs alone (docker-compose)',
    details: `Listens on STAND_IN_HOST:STAND_IN_PORT (default 127.0.0.1:8081). Other variables:
STAND_IN_CLIENT_ID, STAND_IN_CLIENT_SECRET or STAND_IN_CLIENT_SECRET_FILE,
STAND_IN_TOKEN_LIFETIME_MS, STAND_IN_STYLE (ti or apigee), LOG_LEVEL.`
  },
  caller: {
    maxArgs: 0,
    summary: 'the example caller service: calls the store API through the sidecar (docker-compose)',
    details: `Every CALLER_INTERVAL_MS (default 5000) calls CALLER_TARGET_URL (default
http://localhost:8080/v2/store/products/LM358BIDR?currency=USD), with CALLER_TIMEOUT_MS, and
logs the answer.`
  },
  help: {
    args: '[COMMAND]',
    maxArgs: 1,
    summary: 'this text, or a command\'s (also --help, -h, after any command too)',
    details: 'Prints the commands, or what one command does.'
  },
  version: {
    maxArgs: 0,
    summary: 'print the version, the source revision and the Node.js version (also --version, -v)',
    details: `Prints "store-auth-proxy <version> (revision <revision>, node <version>)": the version from
package.json, the revision written into dist/REVISION at build time ("unknown" without one).`
  }
}

function usage (): string {
  const rows = Object.entries(COMMANDS).map(([name, c]) => [`${name}${c.args === undefined ? '' : ` ${c.args}`}`, c.summary] as const)
  const width = Math.max(...rows.map(([left]) => left.length))
  return `${versionLine()}
Usage: node dist/main.js [COMMAND] [ARGS] [--help]

Commands:
${rows.map(([left, summary]) => `  ${left.padEnd(width)}  ${summary}`).join('\n')}

Options (with any command):
  -h, --help     print help and exit 0
  -v, --version  print the version and exit 0

${CONFIG_POINTER}
`
}

function commandHelp (name: string, command: Command): string {
  return `Usage: node dist/main.js ${name}${command.args === undefined ? '' : ` ${command.args}`}

${command.summary}

${command.details}

${CONFIG_POINTER}
`
}

function versionLine (): string {
  const { version, revision, node } = buildInfo()
  return `store-auth-proxy ${version} (revision ${revision}, node ${node})\n`
}

type Invocation =
  | { kind: 'run', command: string, args: string[] }
  | { kind: 'help', text: string }
  | { kind: 'version' }
  | { kind: 'error', message: string }

/** `[COMMAND] [ARGS] [--help | --version]`; `--help` anywhere wins, and runs nothing. */
function parseArgs (argv: string[]): Invocation {
  const flags = argv.filter((a) => a.startsWith('-'))
  const positional = argv.filter((a) => !a.startsWith('-'))
  const name = positional[0] ?? 'serve'
  const command = COMMANDS[name]
  const help = flags.some((f) => f === '--help' || f === '-h')
  if (command === undefined) return { kind: 'error', message: `unknown command "${name}"` }
  if (help) return { kind: 'help', text: name === 'help' || positional.length === 0 ? usage() : commandHelp(name, command) }
  if (flags.some((f) => f === '--version' || f === '-v')) return { kind: 'version' }
  const unknownFlag = flags[0]
  if (unknownFlag !== undefined) return { kind: 'error', message: `unknown option "${unknownFlag}"` }
  const args = positional.slice(1)
  if (args.length > command.maxArgs) return { kind: 'error', message: `${name}: unexpected argument "${args[command.maxArgs] ?? ''}"` }
  if (name === 'version') return { kind: 'version' }
  if (name === 'help') {
    const topic = args[0]
    if (topic === undefined) return { kind: 'help', text: usage() }
    const about = COMMANDS[topic]
    return about === undefined ? { kind: 'error', message: `unknown command "${topic}"` } : { kind: 'help', text: commandHelp(topic, about) }
  }
  return { kind: 'run', command: name, args }
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

const invocation = parseArgs(process.argv.slice(2))
switch (invocation.kind) {
  case 'run':
    await main(invocation.command, invocation.args, process.env)
    break
  case 'help':
    process.stdout.write(invocation.text)
    break
  case 'version':
    process.stdout.write(versionLine())
    break
  case 'error':
    process.stderr.write(`store-auth-proxy: ${invocation.message}\nRun "node dist/main.js --help" for the commands.\n`)
    process.exitCode = 2
}
