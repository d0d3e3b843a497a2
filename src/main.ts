#!/usr/bin/env node
// The entry point, and the only file that reads process.env. `--help` lists the commands
// (src/cli/commands.ts); the README's "Command line" section mirrors it.
//
// Only light modules are imported here. fastify, undici and pino are imported by the
// commands that use them: a container runtime runs `healthcheck` every few seconds, and
// loading the whole stack would cost each check some 0.4 s of CPU and 75 MiB.
import { commandTable, parseInvocation, versionLine } from './cli/commands.js'
import { loadLogger } from './cli/exit.js'
import { describe, loadSidecarConfig, serve } from './cli/serve.js'
import { listenHost } from './config/listeners.js'
import type { Env } from './config/parse-env.js'
import { DEFAULT_ADMIN_PORT } from './config/schema.js'
import { plainHttpWarnings } from './config/warnings.js'
import { DEMO_COMMANDS, runDemoCommand } from './demo/commands.js'
import { probe } from './cli/healthcheck.js'
import { refuseUnsupportedRuntime } from './cli/runtime.js'

const HEALTHCHECK_TIMEOUT_MS = 3000

async function run (command: string, args: string[], env: Env): Promise<void> {
  switch (command) {
    case 'serve': {
      const config = await loadSidecarConfig(env)
      await serve(config, await loadLogger(config.logLevel, config.logFormat))
      return
    }
    case 'check-config': {
      const config = await loadSidecarConfig(env)
      process.stdout.write(`configuration is valid: ${JSON.stringify(describe(config))}\n`)
      for (const warning of plainHttpWarnings(config)) process.stderr.write(`store-auth-proxy: warning: ${warning}\n`)
      return
    }
    case 'healthcheck': {
      // For container HEALTHCHECKs: needs no shell and no curl, only node.
      const admin = listenHost(env.ADMIN_HOST ?? '0.0.0.0')
      const host = admin === '0.0.0.0' || admin === '::' ? '127.0.0.1' : admin
      const url = args[0] ?? `http://${host.includes(':') ? `[${host}]` : host}:${env.ADMIN_PORT ?? DEFAULT_ADMIN_PORT}/readyz`
      const result = await probe(url, HEALTHCHECK_TIMEOUT_MS)
      // One line either way: `docker inspect` and `docker exec ... healthcheck` show it.
      if (result.ok) process.stdout.write(`healthy: ${result.message}\n`)
      else process.stderr.write(`not healthy: ${result.message}\n`)
      process.exit(result.ok ? 0 : 1)
      break
    }
    default:
      await runDemoCommand(command, env)
  }
}

refuseUnsupportedRuntime(process.version, process.stderr, process.exit)
const invocation = parseInvocation(process.argv.slice(2), commandTable(DEMO_COMMANDS))
switch (invocation.kind) {
  case 'run':
    await run(invocation.command, invocation.args, process.env)
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
