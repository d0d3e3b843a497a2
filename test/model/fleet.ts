// The fleet one whole-path model run drives: 2–3 in-process sidecars on one credential, each
// reaching one real redis-server through a TCP fault proxy of its own (a partition of some
// sidecars only), the stand-in TI store API (ti.ts) and a recording OAuth stand-in whose
// tokens live two seconds (so a token lapses within a step once the OAuth API is down).
// Everything a run starts is released when the run ends (runScope), shrinking included.
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { Redis } from 'ioredis'
import { Agent, request } from 'undici'
import type { AppDependencies } from '../../src/app.js'
import { schema } from '../../src/config/schema.js'
import { build, type Built } from '../helpers/build.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'
import { startFaultProxy, type FaultProxy } from '../helpers/tcp-fault-proxy.js'
import { runScope, type RunScope } from '../quota/model/fleet.js'
import { ID_HEADER, startTi, type Ti } from './ti.js'

export { runScope, type RunScope }

/** The fleet protocol's timing, shortened as the quota model shortens it. */
export const QUOTA_TIMING = { heartbeatMs: 200, presenceTtlMs: 600, freshGraceMs: 600 }
export const TOKEN_LIFETIME_S = 2
/** The settings every sidecar of the model runs with: every wait a caller can meet is short. */
export const TIMEOUTS = {
  // Over a busy machine's event-loop stalls (in-process sidecars share one loop), or a healthy
  // Redis looks late and the fleet degrades by definition, hiding what the model looks for.
  RATE_LIMIT_REDIS_TIMEOUT_MS: 300,
  TOKEN_WAIT_MS: 300,
  TOKEN_TIMEOUT_MS: 500,
  UPSTREAM_TIMEOUT_MS: 800,
  UPSTREAM_QUEUE_TIMEOUT_MS: 500,
  /** The sidecar's socket idle timeout: a caller with no status line by then is cut off. */
  IDLE_TIMEOUT_MS: 3000
} as const

/**
 * The setting a persisted ledger lives in, once the sidecar has one (where the features meet: "a ledger
 * persisted to a small state directory"): a restarted sidecar keeps its directory, a
 * replaced one gets a new, empty one. Found in the schema, so the model needs no change the
 * day it lands.
 */
export const STATE_DIR_SETTING = Object.keys(schema.properties).find((name) => /STATE_DIR$/.test(name))

export interface ModelSidecar {
  built: Built
  redisProxy: FaultProxy
  /** Runs of this slot: a restart or a replacement adds one. */
  generation: number
  stateDir: string
  /** Its RATE_LIMIT_FLEET_SIZE: the fleet's size, one more once a rollout replaced it. */
  declared: number
}

export interface Fleet {
  redis: FaultyRedis
  /** An operator's client, for FLUSHALL, CONFIG SET and INFO. */
  admin: Redis
  ti: Ti
  oauth: Awaited<ReturnType<typeof startRecordingTokenEndpoint>>
  sidecars: ModelSidecar[]
  /**
   * Closes sidecar `i` and starts it again: with its state directory (`restart`) or a new one
   * (`replace`), declaring `declared` (a rollout that changes RATE_LIMIT_FLEET_SIZE); same Redis proxy.
   */
  cycle: (i: number, how: 'restart' | 'replace', declared?: number) => Promise<void>
}

export async function startFleet (scope: RunScope, size: number, rateLimits: string): Promise<Fleet> {
  // build() and the helpers use nothing of tap's Test but teardown().
  const t = scope as unknown as Test
  const redis = await startRedis(scope)
  const admin = new Redis(redis.url, { maxRetriesPerRequest: 1, commandTimeout: 2000, lazyConnect: false })
  admin.on('error', () => {})
  scope.teardown(() => { admin.disconnect() })
  const ti = await startTi(scope, { latencyMs: 150 })
  const oauth = await startRecordingTokenEndpoint(t, { expiresInS: TOKEN_LIFETIME_S })
  const deps: Partial<AppDependencies> & { quotaTiming: typeof QUOTA_TIMING } = { quotaTiming: QUOTA_TIMING }
  const dirs: string[] = []
  scope.teardown(async () => { for (const dir of dirs) await rm(dir, { recursive: true, force: true }) })
  const newDir = async (): Promise<string> => {
    const dir = await mkdtemp(join(tmpdir(), 'model-state-'))
    dirs.push(dir)
    return dir
  }
  const env = (proxy: FaultProxy, stateDir: string, declared: number): Record<string, string> => ({
    AUTH_URL: oauth.url,
    UPSTREAM_URL: ti.url,
    RATE_LIMITS: rateLimits,
    RATE_LIMIT_REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    RATE_LIMIT_FLEET_SIZE: String(declared),
    RATE_LIMIT_MAX_WAIT_MS: '0',
    RATE_LIMIT_COOLDOWN_MS: '500',
    ...Object.fromEntries(Object.entries(TIMEOUTS).map(([k, v]) => [k, String(v)])),
    ...(STATE_DIR_SETTING === undefined ? {} : { [STATE_DIR_SETTING]: stateDir })
  })
  const sidecars: ModelSidecar[] = []
  for (let i = 0; i < size; i++) {
    const redisProxy = await startFaultProxy(scope, redis.port)
    const stateDir = await newDir()
    sidecars.push({ built: await build(t, env(redisProxy, stateDir, size), deps), redisProxy, generation: 0, stateDir, declared: size })
  }
  return {
    redis,
    admin,
    ti,
    oauth,
    sidecars,
    cycle: async (i, how, declared) => {
      const old = sidecars[i]
      if (old === undefined) return
      await old.built.app.close()
      const stateDir = how === 'restart' ? old.stateDir : await newDir()
      const next = declared ?? old.declared
      sidecars[i] = { built: await build(t, env(old.redisProxy, stateDir, next), deps), redisProxy: old.redisProxy, generation: old.generation + 1, stateDir, declared: next }
    }
  }
}

export interface CallResult {
  id: string
  status: number | undefined
  headers: Record<string, string | string[] | undefined>
  body: string
  error: string | undefined
  startedAt: number
  doneAt: number
}

// Callers of their own, never sharing a connection with anything else.
const callers = new Agent({ connections: 64, pipelining: 1 })

/** One call; never rejects. `leaveAfterMs`: the caller gives up then. */
export async function call (proxyUrl: string, target: string, id: string, { leaveAfterMs, timeoutMs }: { leaveAfterMs?: number, timeoutMs: number }): Promise<CallResult> {
  const startedAt = performance.now()
  const signal = leaveAfterMs === undefined ? undefined : AbortSignal.timeout(leaveAfterMs)
  try {
    const res = await request(proxyUrl + target, {
      headers: { [ID_HEADER]: id }, dispatcher: callers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, ...(signal === undefined ? {} : { signal })
    })
    const body = await res.body.text()
    return { id, status: res.statusCode, headers: res.headers, body, error: undefined, startedAt, doneAt: performance.now() }
  } catch (error) {
    return { id, status: undefined, headers: {}, body: '', error: (error as Error).message, startedAt, doneAt: performance.now() }
  }
}
