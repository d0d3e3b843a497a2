// The idempotency stage as the app builds it: only when a rule has idempotency=; its keys in
// the fleet's Redis when RATE_LIMIT_REDIS_URL is set, else in memory and the state directory.
import { join } from 'node:path'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import { trimCredential } from '../config/credentials.js'
import type { Config } from '../config/load.js'
import { rereadRedisUrl } from '../config/rate-limits.js'
import { readSecretFile, readSecretFileSync } from '../config/secret-file.js'
import type { Metrics } from '../metrics.js'
import type { KeyStore } from './entries.js'
import { createMemoryStore } from './memory-store.js'
import type { RedisKeyTiming } from './redis-store.js'
import { createIdempotencyStage, type IdempotencyStage } from './stage.js'

/** Beyond the longest a request can take on its way (token, budget, queue, answer, one 401 replay), a margin. */
export const PENDING_MARGIN_MS = 5_000

/** Tests shorten the fleet's epoch check and recovery window, and the pending margin. */
export type IdempotencyTiming = Partial<RedisKeyTiming> & { pendingMarginMs?: number }

export interface IdempotencyParts {
  log: Logger
  clock: Clock
  metrics: Metrics
  readFile?: (path: string) => Promise<string>
  timing?: IdempotencyTiming
}

/** How long a request may be on its way before a pending key whose sidecar is gone counts as unknown. */
export function pendingMs (config: Config, marginMs = PENDING_MARGIN_MS): number {
  const send = config.rateLimits.maxWaitMs + config.upstream.queueTimeoutMs + config.upstream.timeoutMs
  return config.token.waitMs + config.token.timeoutMs + 2 * send + marginMs
}

export async function createIdempotency (config: Config, { log, clock, metrics, readFile, timing = {} }: IdempotencyParts): Promise<IdempotencyStage | undefined> {
  const rules = config.rateLimits.rules
  if (!rules.some((rule) => rule.idempotency !== undefined)) return undefined
  const local = createMemoryStore({ clock, ...(config.stateDir === undefined ? {} : { dir: join(config.stateDir, 'idempotency') }) })
  let store: KeyStore = local
  const redisUrl = config.rateLimits.redisUrl
  if (redisUrl !== undefined) {
    // The budgets' Redis and key prefix (one credential, one namespace); ioredis only when set.
    const [{ createRedisKeyStore }, { redisKeyPrefix }] = await Promise.all([import('./redis-store.js'), import('../quota/redis-backend.js')])
    const clientId = 'value' in config.token.clientId ? config.token.clientId.value : trimCredential(await (readFile ?? readSecretFile)(config.token.clientId.file))
    const urlFile = config.rateLimits.redisUrlFile
    store = createRedisKeyStore({
      connection: {
        url: redisUrl,
        timeoutMs: config.rateLimits.redisTimeoutMs,
        ...(urlFile === undefined ? {} : { currentUrl: () => rereadRedisUrl(urlFile, readSecretFileSync) })
      },
      prefix: redisKeyPrefix(config.token.authUrl, clientId),
      clock,
      log,
      mirror: local,
      timing
    })
  }
  log.info({ backend: store.backend, rules: rules.filter((r) => r.idempotency !== undefined).map((r) => r.id) }, 'idempotent routes: one send per key')
  return createIdempotencyStage({ rules, store, clock, metrics, log, pendingMs: pendingMs(config, timing.pendingMarginMs) })
}
