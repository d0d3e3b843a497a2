import { pino, type DestinationStream, type Logger } from 'pino'
import type { LogFormat, LogLevel } from './config/schema.js'

const SENSITIVE_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'set-cookie']
const SENSITIVE_FIELDS = ['access_token', 'accessToken', 'client_secret', 'clientSecret', 'token']

// Whatever ends up in a log line by mistake, these never print: the headers that
// carry credentials, wherever a headers object is logged, and the token fields.
export const REDACT_PATHS = [
  ...SENSITIVE_HEADERS.flatMap((h) => [
    `headers["${h}"]`, `req.headers["${h}"]`, `res.headers["${h}"]`, `*.headers["${h}"]`
  ]),
  ...SENSITIVE_FIELDS.flatMap((f) => [f, `*.${f}`])
]

type TraceFields = (logger: object) => { trace_id: string, span_id: string } | undefined
let traceFields: TraceFields = () => undefined
/**
 * With tracing on (src/tracing/request.ts): the trace and span ids of the request a line is
 * logged for, added to it by the mixin below. `undefined` turns them off again.
 */
export function logTraceFields (fields: TraceFields | undefined): void {
  traceFields = fields ?? (() => undefined)
}

/** The one logger setup: pino JSON, redacted, to stdout unless a stream is given (tests, pretty). */
export function createLogger (level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'store-auth-proxy' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    mixin: (_fields: object, _level: number, logger: Logger): object => traceFields(logger) ?? {}
  }
  return destination === undefined ? pino(options) : pino(options, destination)
}

/** LOG_FORMAT as it applies: `auto` is for a person on a terminal, JSON for everything else. */
export function logFormatFor (format: LogFormat, stdoutIsTerminal: boolean): 'json' | 'pretty' {
  return format === 'auto' ? (stdoutIsTerminal ? 'pretty' : 'json') : format
}

/**
 * Where JSON lines go: stdout (or `fd`), written as the event loop allows and flushed at exit
 * (pino's default); `flushSync` writes what is still held, before a last line on stderr.
 */
export function jsonDestination (fd = 1): DestinationStream & { flushSync: () => void } {
  return pino.destination({ dest: fd, sync: false })
}

/**
 * Lines for a person (LOG_FORMAT=pretty, or auto on a terminal): time, level and message in
 * colour, then the fields. pino-pretty is loaded only here. Written synchronously, so every
 * line is out before the process exits or writes to stderr.
 */
export async function prettyDestination (destination: number | NodeJS.WritableStream = 1, colorize?: boolean): Promise<DestinationStream> {
  const { default: pretty } = await import('pino-pretty')
  return pretty({
    destination,
    sync: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'service',
    ...(colorize === undefined ? {} : { colorize })
  })
}
