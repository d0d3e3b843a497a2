// The quota guard as app.ts builds it: the ledger kept in STATE_DIR, the fleet's Redis store
// when RATE_LIMIT_REDIS_URL is set, and the read cache when a rule has cache= (its copies
// shared in the same Redis). Redis, the fleet store and the cache are loaded with import()
// only when configured (start-up time and memory per pod).
import type { Logger } from 'pino'
import type { ReadCache } from '../cache/read-cache.js'
import type { SharedCache } from '../cache/redis-cache.js'
import { systemClock, type Clock } from '../clock.js'
import { trimCredential } from '../config/credentials.js'
import type { Config } from '../config/load.js'
import type { Limit } from '../config/rate-limit-rules.js'
import { rereadRedisUrl } from '../config/rate-limits.js'
import { readSecretFile, readSecretFileSync } from '../config/secret-file.js'
import type { Metrics } from '../metrics.js'
import type { ReadFile } from '../token/credentials.js'
import type { FleetStore, FleetTiming } from './fleet-store.js'
import { createQuotaGuard, type QuotaGuard } from './guard.js'
import { createLedger } from './ledger.js'
import { createLedgerWriter, readLedgerFile, restoreLedger, vouchesFor } from './ledger-file.js'
import { exportBudgets } from './rate-limit-fields.js'
import { newMemberId } from './store.js'

export interface QuotaDependencies {
  log: Logger
  clock?: Clock
  readFile?: ReadFile
  /** The fleet protocol's timing (heartbeat, presence TTL, fresh-epoch grace); tests shorten it. */
  quotaTiming?: Partial<FleetTiming>
  /** The memory limit the overload manager watches (0: none): it bounds the read cache too. */
  memoryLimitBytes?: number
}

/**
 * The quota guard, with its Redis store when RATE_LIMIT_REDIS_URL is set, and the read cache
 * when a rule has cache= (its copies shared in the same Redis).
 */
export async function createQuota (config: Config, deps: QuotaDependencies, metrics: Metrics): Promise<{ quota: QuotaGuard, cache?: ReadCache }> {
  const { log, clock = systemClock, readFile, quotaTiming, memoryLimitBytes = 0 } = deps
  const rateLimits = config.rateLimits
  const caching = rateLimits.rules.some((rule) => rule.cache !== undefined)
  // ioredis is loaded only when a Redis URL is set (start-up time and memory per pod).
  let fleet: ((onCooldown: (scope: string) => void) => FleetStore) | undefined
  let shared: SharedCache | undefined
  const durable = config.stateDir === undefined || rateLimits.rules.length === 0 ? undefined : keptLedger(config.stateDir, config, clock, log.child({ component: 'quota' }))
  if (rateLimits.redisUrl !== undefined) {
    const [{ createRedisStore, redisKeyPrefix }, { createFleetStore }] = await Promise.all([
      import('./redis-backend.js'), import('./fleet-store.js')])
    const clientId = 'value' in config.token.clientId
      ? config.token.clientId.value
      : trimCredential(await (readFile ?? readSecretFile)(config.token.clientId.file))
    const urlFile = rateLimits.redisUrlFile
    const connection = {
      url: rateLimits.redisUrl,
      timeoutMs: rateLimits.redisTimeoutMs,
      prefix: redisKeyPrefix(config.token.authUrl, clientId),
      ...(urlFile === undefined ? {} : { currentUrl: () => rereadRedisUrl(urlFile, readSecretFileSync) })
    }
    const redis = createRedisStore({ ...connection, clock })
    // The read cache's connection only when a rule has cache=.
    if (caching && config.cache.redisMaxBytes > 0) {
      shared = (await import('../cache/redis-cache.js')).createSharedCache({ ...connection, now: () => clock.now(), maxBytes: config.cache.redisMaxBytes })
    }
    fleet = (onCooldown) => createFleetStore({
      ...(durable === undefined ? {} : { ledger: durable.ledger, memberId: durable.member, ledgerWhole: durable.whole }),
      redis,
      clock,
      log: log.child({ component: 'quota' }),
      metrics,
      rules: rateLimits.rules,
      redisTimeoutMs: rateLimits.redisTimeoutMs,
      fleetFloor: rateLimits.fleetSize,
      // 0: no bound, and no span told to Redis (its entry ends only by the count).
      ...(rateLimits.aloneMaxMs > 0 ? { aloneMaxMs: rateLimits.aloneMaxMs } : {}),
      ...(quotaTiming === undefined ? {} : { timing: quotaTiming }),
      onCooldown
    })
  }
  const quota = createQuotaGuard({
    config: rateLimits,
    clock,
    log: log.child({ component: 'quota' }),
    metrics,
    ...(fleet === undefined ? {} : { fleet }),
    ...(durable === undefined ? {} : { durable })
  })
  exportBudgets(metrics, rateLimits.rules, (rule) => quota.budget(rule))
  if (!caching) return { quota }
  // lru-cache is loaded only when a rule has cache=.
  const [{ createReadCache }, { cacheBound, cacheBoundWarnings }] = await Promise.all([import('../cache/read-cache.js'), import('../cache/memory-bound.js')])
  const cacheLog = log.child({ component: 'cache' })
  const maxBytes = cacheBound(memoryLimitBytes, config.cache.maxBytes)
  cacheLog.info({ maxBytes, configuredMaxBytes: config.cache.maxBytes, memoryLimitBytes }, 'read cache bound in memory')
  for (const warning of cacheBoundWarnings(config, memoryLimitBytes)) cacheLog.warn(warning)
  const cache = createReadCache({
    clock,
    log: cacheLog,
    metrics,
    maxBytes,
    configuredMaxBytes: config.cache.maxBytes,
    entryMaxBytes: config.cache.entryMaxBytes,
    fillMs: rateLimits.maxWaitMs + config.upstream.queueTimeoutMs + config.upstream.timeoutMs,
    ...(shared === undefined ? {} : { shared })
  })
  return { quota, cache }
}

/** The quota ledger kept in STATE_DIR: an earlier run's sends restored, a writer for this run's. */
function keptLedger (dir: string, config: Config, clock: Clock, log: Logger) {
  const { rules, redisUrl, fleetSize } = config.rateLimits
  const loaded = readLedgerFile(dir)
  const ledger = createLedger(clock)
  // A corrupt file: as spent as this sidecar could spend alone (embedded: the whole budget).
  const capacity = (limit: Limit): number => redisUrl === undefined ? limit.count : fleetSize === 0 ? 0 : Math.floor(limit.count / fleetSize)
  const restored = restoreLedger(ledger, loaded, rules, clock, capacity)
  if (loaded.state === 'corrupt') {
    log.warn({ reason: loaded.reason, held: restored }, 'rate-limit ledger in STATE_DIR unusable: every budget held as spent for one window')
  } else {
    log.info({ restored }, loaded.state === 'missing' ? 'no rate-limit ledger in STATE_DIR yet: a first start here' : 'rate-limit ledger restored from STATE_DIR')
  }
  const member = loaded.state === 'loaded' && loaded.member !== '' ? loaded.member : newMemberId()
  return { ledger, member, whole: vouchesFor(loaded, restored, clock), save: createLedgerWriter(dir, member, ledger, clock).save }
}
