import { pino, type DestinationStream, type Logger } from 'pino'
import type { LogLevel } from './config/schema.js'

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

/** The one logger setup: pino JSON, redacted, to stdout unless a stream is given (tests). */
export function createLogger (level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { service: 'store-auth-proxy' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' }
  }
  return destination === undefined ? pino(options) : pino(options, destination)
}
