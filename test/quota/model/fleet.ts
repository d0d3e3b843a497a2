// The fleet one model run drives: N in-process sidecars on one credential, each reaching
// one real redis-server through a fault proxy of its own (a partition of some sidecars
// only), one arrival-recording upstream behind a fault proxy (connection refused), one
// stand-in token endpoint. Everything a run starts is released when the run ends, so a
// property can start a fresh fleet for each of its runs, shrinking included.
import type { Test } from 'tap'
import { request, Agent } from 'undici'
import type { AppDependencies } from '../../../src/app.js'
import { build, startStandIn, type Built } from '../../helpers/build.js'
import { startRedis, type FaultyRedis } from '../../helpers/redis.js'
import { startFaultProxy, type FaultProxy } from '../../helpers/tcp-fault-proxy.js'
import { ID_HEADER, startArrivalUpstream, type ArrivalUpstream } from '../../fleet/fleet.js'

/** The spec's test knob for the fleet protocol's timing (ignored by code that lacks it). */
export const QUOTA_TIMING = { heartbeatMs: 200, presenceTtlMs: 600, freshGraceMs: 600 }
export const REDIS_TIMEOUT_MS = 100

/** Teardowns of one run, released in reverse order by `close()`. */
export function runScope () {
  const teardowns: Array<() => unknown> = []
  return {
    teardown: (fn: () => unknown) => { teardowns.push(fn) },
    close: async () => {
      for (const fn of teardowns.splice(0).reverse()) await fn()
    }
  }
}
export type RunScope = ReturnType<typeof runScope>

export interface FleetSidecar { built: Built, redisProxy: FaultProxy, generation: number }

export interface Fleet {
  redis: FaultyRedis
  upstream: ArrivalUpstream
  upstreamProxy: FaultProxy
  sidecars: FleetSidecar[]
  /** Closes sidecar `i` and builds a new one on the same credential and the same Redis proxy. */
  restartSidecar: (i: number) => Promise<void>
}

export async function startFleet (scope: RunScope, size: number, env: Record<string, string>, envOf: (i: number) => Record<string, string> = () => ({})): Promise<Fleet> {
  // build() and the other helpers use nothing of tap's Test but teardown(): the run's
  // scope stands in for it, so each run's fleet is gone before the next run starts.
  const t = scope as unknown as Test
  const redis = await startRedis(scope)
  const upstream = await startArrivalUpstream(t)
  const upstreamProxy = await startFaultProxy(scope, Number(new URL(upstream.url).port))
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * 24 * 3_600_000 })
  // Not in AppDependencies until the implementation has it: passed as a variable, so
  // TypeScript lets the extra property through and today's code ignores it.
  const deps: Partial<AppDependencies> & { quotaTiming: typeof QUOTA_TIMING } = { quotaTiming: QUOTA_TIMING }
  const sidecarEnv = (proxy: FaultProxy, i: number): Record<string, string> => ({
    AUTH_URL: standIn.url,
    UPSTREAM_URL: `http://127.0.0.1:${upstreamProxy.port}`,
    RATE_LIMIT_REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    RATE_LIMIT_FLEET_SIZE: String(size),
    RATE_LIMIT_MAX_WAIT_MS: '0',
    RATE_LIMIT_REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
    RATE_LIMIT_COOLDOWN_MS: '0',
    ...env,
    ...envOf(i)
  })
  const sidecars: FleetSidecar[] = []
  for (let i = 0; i < size; i++) {
    const redisProxy = await startFaultProxy(scope, redis.port)
    sidecars.push({ built: await build(t, sidecarEnv(redisProxy, i), deps), redisProxy, generation: 0 })
  }
  return {
    redis,
    upstream,
    upstreamProxy,
    sidecars,
    restartSidecar: async (i) => {
      const old = sidecars[i]
      if (old === undefined) return
      await old.built.app.close()
      sidecars[i] = { built: await build(t, sidecarEnv(old.redisProxy, i), deps), redisProxy: old.redisProxy, generation: old.generation + 1 }
    }
  }
}

export interface CallResult {
  status: number | undefined
  headers: Record<string, string | string[] | undefined>
  body: string
  error: string | undefined
  startedAt: number
  doneAt: number
}

// Callers of their own, apart from the status scrapes.
const callers = new Agent({ connections: 32 })

/** One call with the upstream's id header; never rejects. `leaveAfterMs`: the caller gives up then. */
export async function call (proxyUrl: string, path: string, id: string, { leaveAfterMs, timeoutMs }: { leaveAfterMs?: number, timeoutMs: number }): Promise<CallResult> {
  const startedAt = performance.now()
  const signal = leaveAfterMs === undefined ? undefined : AbortSignal.timeout(leaveAfterMs)
  try {
    const res = await request(proxyUrl + path, {
      headers: { [ID_HEADER]: id }, dispatcher: callers, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, ...(signal === undefined ? {} : { signal })
    })
    const body = await res.body.text()
    return { status: res.statusCode, headers: res.headers, body, error: undefined, startedAt, doneAt: performance.now() }
  } catch (error) {
    return { status: undefined, headers: {}, body: '', error: (error as Error).message, startedAt, doneAt: performance.now() }
  }
}

/** What one sidecar's /status says of its quota state (undefined fields: not shown by this version). */
export interface QuotaView {
  backend: string | undefined
  redisUp: boolean | undefined
  degraded: boolean | undefined
  fleet: { size: number, present: number } | undefined
  cooldowns: number
}

export async function quotaView (adminUrl: string): Promise<QuotaView | undefined> {
  try {
    const res = await request(adminUrl + '/status', { headersTimeout: 2000, bodyTimeout: 2000 })
    const doc = await res.body.json() as { rateLimits?: { backend?: string, redis?: { up?: boolean } | null, degraded?: boolean, fleet?: { size: number, present: number }, cooldowns?: unknown[] } }
    const q = doc.rateLimits
    return { backend: q?.backend, redisUp: q?.redis?.up, degraded: q?.degraded, fleet: q?.fleet, cooldowns: q?.cooldowns?.length ?? 0 }
  } catch {
    return undefined
  }
}
