#!/usr/bin/env node
// The entry point, and the only file that reads process.env. `--help` lists the commands
// (src/cli/commands.ts); the README's "Command line" section mirrors it.
//
// Only light modules are imported here: each command imports what it runs, and nothing
// else. A container runtime runs `healthcheck` every few seconds (loading the whole stack
// would cost each check some 0.4 s of CPU and 75 MiB), and `serve` loads neither the demo
// nor the other commands (test/startup/loaded-modules.test.ts).
import { commandTable, parseInvocation, versionLine } from './cli/commands.js'
import { listenHost } from './config/listeners.js'
import type { Env } from './config/parse-env.js'
import { DEFAULT_ADMIN_PORT } from './config/schema.js'
import { DEMO_COMMANDS } from './demo/command-table.js'
import { refuseUnsupportedRuntime } from './cli/runtime.js'

const HEALTHCHECK_TIMEOUT_MS = 3000

async function run (command: string, args: string[], env: Env): Promise<void> {
  switch (command) {
    case 'serve': {
      const [{ loadSidecarConfig, serve }, { loadLogger }] = await Promise.all([import('./cli/serve.js'), import('./cli/exit.js')])
      const config = await loadSidecarConfig(env)
      await serve(config, await loadLogger(config.log.level, config.log.format))
      return
    }
    case 'check-config': {
      const [{ describe, loadSidecarConfig }, { cacheBoundWarnings, cachedWaitWarnings, plainHttpWarnings }, { memoryLimit }, { limitWarnings }] = await Promise.all([
        import('./cli/serve.js'), import('./config/warnings.js'), import('./overload/memory-limit.js'), import('./overload/limit-warnings.js')])
      const config = await loadSidecarConfig(env)
      process.stdout.write(`configuration is valid: ${JSON.stringify(describe(config))}\n`)
      // The limit as serve would read it here (this container's cgroup, or MEMORY_LIMIT_BYTES).
      const limit = memoryLimit(config.overload.memoryLimitBytes)
      for (const warning of [...plainHttpWarnings(config), ...cachedWaitWarnings(config), ...cacheBoundWarnings(config, limit.bytes), ...limitWarnings(config, limit)]) process.stderr.write(`store-auth-proxy: warning: ${warning}\n`)
      return
    }
    case 'healthcheck': {
      // For container HEALTHCHECKs: needs no shell and no curl, only node.
      const admin = listenHost(env.ADMIN_HOST ?? '0.0.0.0')
      const host = admin === '0.0.0.0' || admin === '::' ? '127.0.0.1' : admin
      const url = args[0] ?? `http://${host.includes(':') ? `[${host}]` : host}:${env.ADMIN_PORT ?? DEFAULT_ADMIN_PORT}/readyz`
      const { probe } = await import('./cli/healthcheck.js')
      const result = await probe(url, HEALTHCHECK_TIMEOUT_MS)
      // One line either way: `docker inspect` and `docker exec ... healthcheck` show it.
      if (result.ok) process.stdout.write(`healthy: ${result.message}\n`)
      else process.stderr.write(`not healthy: ${result.message}\n`)
      process.exit(result.ok ? 0 : 1)
      break
    }
    default:
      await (await import('./demo/commands.js')).runDemoCommand(command, env)
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
