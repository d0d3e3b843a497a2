// How a command ends on an operator's error: one line on stderr and exit 1, no stack trace.
import type { Logger } from 'pino'
import { ConfigError } from '../config/parse-env.js'
import type { LogFormat, LogLevel } from '../config/schema.js'
import { listenHost } from '../config/listeners.js'
import { listenFailure } from './listen-failure.js'

export function configOrExit<T> (load: () => T): T {
  try {
    return load()
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err
    // One message naming every bad variable; no stack trace, never a value.
    exitWith(err.message)
  }
}

/** What the logger of this process still holds for stdout (JSON lines are written as the loop allows). */
let unwritten: { flushSync: () => void } | undefined

/**
 * One line on stderr, exit 1: after every log line already logged, so that nothing the process
 * logged before it (`Server listening at …`) reads as if it came after.
 */
function exitWith (line: string): never {
  try {
    unwritten?.flushSync()
  } catch {
    // stdout gone or stuck (EPIPE, EAGAIN): the line below matters more than the order.
  }
  process.stderr.write(`store-auth-proxy: ${line}\n`)
  process.exit(1)
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
    exitWith(listenFailure(names, host, port, err))
  }
}

/** pino is loaded by the commands that log, never by `healthcheck`; pino-pretty only for a person. */
export async function loadLogger (level: LogLevel, format: LogFormat): Promise<Logger> {
  const { createLogger, jsonDestination, logFormatFor, prettyDestination } = await import('../logger.js')
  if (logFormatFor(format, process.stdout.isTTY === true) === 'pretty') return createLogger(level, await prettyDestination())
  const destination = jsonDestination()
  unwritten = destination
  return createLogger(level, destination)
}
