// The settings of the demo commands: the stand-in TI APIs (`main.js stand-in`, used by
// docker-compose and the demo) and the example caller (`main.js caller`).
import { trimCredential } from '../config/credentials.js'
import { ConfigError, defaultReadFileSync, parseEnvOrThrow, type Env, type ReadFileSync } from '../config/parse-env.js'
import { durationMs, logFormat, logLevel, port, type LogFormat, type LogLevel } from '../config/schema.js'
import { checkUrl } from '../config/urls.js'

export const DEFAULT_STAND_IN_PORT = 8081
export const DEMO_CLIENT_ID = 'demo-client'
// A secret with `+`, `/` and `=`, the characters percent-encoding would change: the
// demo shows it reaching the token endpoint exactly as is.
export const DEMO_CLIENT_SECRET = 'Zm9v+YmFy/c2VjcmV0='

export interface StandInConfig {
  readonly host: string
  readonly port: number
  readonly clientId: string
  readonly clientSecret: string
  readonly tokenLifetimeMs: number
  readonly style: 'ti' | 'apigee'
  readonly logLevel: LogLevel
  readonly logFormat: LogFormat
}

const standInSchema = {
  type: 'object',
  properties: {
    STAND_IN_HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    STAND_IN_PORT: port(DEFAULT_STAND_IN_PORT),
    STAND_IN_CLIENT_ID: { type: 'string', minLength: 1, default: DEMO_CLIENT_ID },
    STAND_IN_CLIENT_SECRET: { type: 'string', minLength: 1, default: DEMO_CLIENT_SECRET },
    STAND_IN_CLIENT_SECRET_FILE: { type: 'string' },
    STAND_IN_TOKEN_LIFETIME_MS: durationMs(60 * 60_000, 1000),
    STAND_IN_STYLE: { type: 'string', enum: ['ti', 'apigee'], default: 'ti' },
    LOG_LEVEL: logLevel,
    LOG_FORMAT: logFormat
  }
} as const

export function loadStandInConfig (env: Env, readFile: ReadFileSync = defaultReadFileSync): StandInConfig {
  const raw = parseEnvOrThrow(standInSchema, env)
  let clientSecret = raw.STAND_IN_CLIENT_SECRET
  if (raw.STAND_IN_CLIENT_SECRET_FILE !== undefined && raw.STAND_IN_CLIENT_SECRET_FILE !== '') {
    try {
      clientSecret = trimCredential(readFile(raw.STAND_IN_CLIENT_SECRET_FILE))
    } catch (err) {
      throw new ConfigError([`STAND_IN_CLIENT_SECRET_FILE: cannot read it (${(err as NodeJS.ErrnoException).code ?? 'error'})`])
    }
  }
  return Object.freeze({
    host: raw.STAND_IN_HOST,
    port: raw.STAND_IN_PORT,
    clientId: raw.STAND_IN_CLIENT_ID,
    clientSecret,
    tokenLifetimeMs: raw.STAND_IN_TOKEN_LIFETIME_MS,
    style: raw.STAND_IN_STYLE,
    logLevel: raw.LOG_LEVEL,
    logFormat: raw.LOG_FORMAT
  })
}

export interface CallerConfig {
  readonly targetUrl: string
  readonly intervalMs: number
  readonly timeoutMs: number
  readonly logLevel: LogLevel
  readonly logFormat: LogFormat
}

const callerSchema = {
  type: 'object',
  properties: {
    CALLER_TARGET_URL: { type: 'string', minLength: 1, default: 'http://localhost:8080/v2/store/products/LM358BIDR?currency=USD' },
    CALLER_INTERVAL_MS: durationMs(5000, 100),
    CALLER_TIMEOUT_MS: durationMs(10_000),
    LOG_LEVEL: logLevel,
    LOG_FORMAT: logFormat
  }
} as const

export function loadCallerConfig (env: Env): CallerConfig {
  const raw = parseEnvOrThrow(callerSchema, env)
  const problems: string[] = []
  const targetUrl = checkUrl('CALLER_TARGET_URL', raw.CALLER_TARGET_URL, problems, { allowQuery: true })
  if (targetUrl === undefined) throw new ConfigError(problems)
  return Object.freeze({
    targetUrl,
    intervalMs: raw.CALLER_INTERVAL_MS,
    timeoutMs: raw.CALLER_TIMEOUT_MS,
    logLevel: raw.LOG_LEVEL,
    logFormat: raw.LOG_FORMAT
  })
}
