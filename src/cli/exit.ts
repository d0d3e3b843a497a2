// How a command ends on an operator's error: one line on stderr and exit 1, no stack trace.
import type { Logger } from 'pino'
import { ConfigError } from '../config/parse-env.js'
import type { LogLevel } from '../config/schema.js'
import { listenHost } from '../config/listeners.js'
import { listenFailure } from './listen-failure.js'

export function configOrExit<T> (load: () => T): T {
  try {
    return load()
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    // One message naming every bad variable; no stack trace, never a value.
    process.stderr.write(`store-auth-proxy: ${err.message}\n`)
    process.exit(1)
  }
}

interface Listener { listen: (options: { host: string, port: number, backlog?: number }) => Promise<unknown> }

/**
 * Listens, or exits 1 with one line naming the variables that chose the address
 * (EADDRINUSE, EACCES, an address not of this machine, a host that does not resolve):
 * an operator's error, not a crash, so no stack trace.
 */
export async function listenOrExit (server: Listener, names: { host: string, port: string }, host: string, port: number, backlog?: number): Promise<void> {
  try {
    await server.listen({ host: listenHost(host), port, ...(backlog === undefined ? {} : { backlog }) })
  } catch (err) {
    process.stderr.write(`store-auth-proxy: ${listenFailure(names, host, port, err)}\n`)
    process.exit(1)
  }
}

/** pino is loaded by the commands that log, never by `healthcheck`. */
export async function loadLogger (level: LogLevel): Promise<Logger> {
  const { createLogger } = await import('../logger.js')
  return createLogger(level)
}
