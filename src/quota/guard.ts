// The quota guard: before each upstream send, the request's rule (or the whole upstream)
// must not be cooling down and its budget must have room; after a gateway rate-limit
// answer, a cool-down starts. Budgets and cool-downs live in Redis when it is configured
// and answers, in memory otherwise (the fallback is silent to callers).
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { RateLimitConfig } from '../config.js'
import type { Metrics } from '../metrics.js'
import type { RedisStore } from './redis-backend.js'
import { retryAfterMs } from './retry-after.js'
import { matchRule, type Limit, type Rule } from './rules.js'
import { createMemoryStore, type Take } from './store.js'

/** The scope of a request that matches no rule: with no rules at all, the whole upstream cools down. */
export const UPSTREAM_SCOPE = 'upstream'
/** While on the in-memory fallback, how often Redis is asked whether it answers again. */
export const REDIS_PROBE_MS = 1_000

export type Verdict =
  | { readonly ok: true, readonly delayed: boolean }
  | { readonly ok: false, readonly reason: 'budget' | 'cooldown', readonly retryAfterMs: number, readonly scope: string }
  /** The caller left while waiting for its budget: nothing was spent, nothing is sent. */
  | { readonly ok: false, readonly reason: 'gone' }

export const GO: Verdict = Object.freeze({ ok: true, delayed: false })
const GO_DELAYED: Verdict = Object.freeze({ ok: true, delayed: true })
const GONE: Verdict = Object.freeze({ ok: false, reason: 'gone' })
const NO_LIMITS: readonly Limit[] = Object.freeze([])

/** The caller's side of the exchange (its ServerResponse): it emits 'close' when the caller leaves. */
export interface Caller {
  readonly destroyed: boolean
  once: (event: 'close', listener: () => void) => unknown
  removeListener: (event: 'close', listener: () => void) => unknown
}

export interface RateLimitStatus {
  backend: 'memory' | 'redis'
  redis: { url: string, up: boolean } | null
  rules: Array<{ rule: string, limits: string[] }>
  cooldowns: Array<{ rule: string, until: string }>
}

export interface GuardOptions {
  config: RateLimitConfig
  clock: Clock
  log: Logger
  metrics: Metrics
  /** The shared store, when RATE_LIMIT_REDIS_URL is set (loaded by app.ts with a dynamic import). */
  redis?: RedisStore
}

export function createQuotaGuard ({ config, clock, log, metrics, redis }: GuardOptions) {
  const { rules, maxWaitMs, cooldownMs, cooldownMaxMs } = config
  const memory = createMemoryStore(clock)
  /** Whether anything can ever stop a request: otherwise admit() is a constant. */
  const active = rules.length > 0 || cooldownMs > 0
  let backend: 'memory' | 'redis' = 'memory'
  let redisUp = false
  /** Redis was in use and stopped answering: the fallback is under way. */
  let fellBack = false
  let stopProbe: (() => void) | undefined
  let closed = false

  // Cool-downs this sidecar knows of (started here, or met in Redis): /status and the gauge.
  const known = new Map<string, { endsAt: number, cancel: () => void }>()
  function note (scope: string, ms: number): void {
    if (ms <= 0) return
    const endsAt = clock.now() + ms
    const current = known.get(scope)
    if (current !== undefined && current.endsAt >= endsAt - 1) return
    current?.cancel()
    metrics.rateLimitCooldownUntil.set({ rule: scope }, Math.round((clock.wallNow() + ms) / 1000))
    const cancel = clock.setTimer(() => {
      if (known.get(scope)?.endsAt !== endsAt) return
      known.delete(scope)
      metrics.rateLimitCooldownUntil.set({ rule: scope }, 0)
    }, ms)
    known.set(scope, { endsAt, cancel })
  }
  for (const rule of rules) metrics.rateLimitCooldownUntil.set({ rule: rule.id }, 0)
  metrics.rateLimitCooldownUntil.set({ rule: UPSTREAM_SCOPE }, 0)

  function useBackend (next: 'memory' | 'redis'): void {
    backend = next
    metrics.rateLimitBackend.set({ backend: 'memory' }, next === 'memory' ? 1 : 0)
    metrics.rateLimitBackend.set({ backend: 'redis' }, next === 'redis' ? 1 : 0)
  }

  function setRedisUp (up: boolean): void {
    redisUp = up
    metrics.rateLimitRedisUp?.set(up ? 1 : 0)
  }

  /** Redis failed or was too slow: this sidecar goes on with in-memory limits, said once. */
  function fallBack (err: unknown): void {
    setRedisUp(false)
    if (backend !== 'redis') return
    useBackend('memory')
    fellBack = true
    metrics.rateLimitRedisFallbacks.inc()
    log.warn({ redis: redis?.displayUrl, reason: redis?.describe(err) },
      'rate-limit redis unreachable or too slow: budgets and cool-downs are per sidecar, in memory, until it answers')
    scheduleProbe()
  }

  function recover (): void {
    setRedisUp(true)
    if (backend === 'redis' || closed) return
    useBackend('redis')
    // Cool-downs begun while Redis was away go to Redis, so the whole fleet keeps them.
    if (redis !== undefined) {
      const now = clock.now()
      for (const [scope, cooldown] of known) {
        const leftMs = cooldown.endsAt - now
        if (leftMs <= 0) continue
        redis.coolDown(scope, { retryAfterMs: leftMs, baseMs: cooldownMs, maxMs: cooldownMaxMs }).catch(fallBack)
      }
    }
    if (fellBack) log.info({ redis: redis?.displayUrl }, 'rate-limit redis answers again: budgets and cool-downs are shared')
    else log.info({ redis: redis?.displayUrl }, 'rate-limit budgets and cool-downs are shared in redis')
    fellBack = false
  }

  function scheduleProbe (): void {
    if (redis === undefined || closed || stopProbe !== undefined) return
    stopProbe = clock.setTimer(() => {
      stopProbe = undefined
      void probe()
    }, REDIS_PROBE_MS)
  }

  async function probe (): Promise<void> {
    if (redis === undefined || closed || backend === 'redis') return
    if (await redis.ping()) recover()
    else scheduleProbe()
  }

  async function takeShared (scope: string, limits: readonly Limit[]): Promise<Take> {
    if (backend === 'redis' && redis !== undefined) {
      try {
        return await redis.take(scope, limits)
      } catch (err) {
        fallBack(err)
      }
    }
    return memory.take(scope, limits)
  }

  function take (scope: string, limits: readonly Limit[]): Take | Promise<Take> {
    if (backend === 'memory') return memory.take(scope, limits)
    // A cool-down this sidecar holds in memory (begun while Redis was away, or not yet
    // written there) stands even when Redis does not know it.
    const localEnd = memory.cooldownEnd(scope)
    if (localEnd !== undefined) return { kind: 'cooldown', ms: localEnd - clock.now() }
    return takeShared(scope, limits)
  }

  /** Waits `ms` unless the caller leaves first; true when it left. */
  function sleep (ms: number, caller: Caller): Promise<boolean> {
    if (caller.destroyed) return Promise.resolve(true)
    return new Promise((resolve) => {
      const left = (): void => {
        cancel()
        resolve(true)
      }
      caller.once('close', left)
      const cancel = clock.setTimer(() => {
        caller.removeListener('close', left)
        resolve(false)
      }, ms)
    })
  }

  function refuse (scope: string, reason: 'budget' | 'cooldown', ms: number): Verdict {
    metrics.rateLimited.inc({ rule: scope, reason, action: 'refused' })
    if (reason === 'cooldown') note(scope, ms)
    return { ok: false, reason, retryAfterMs: ms, scope }
  }

  async function settle (scope: string, limits: readonly Limit[], first: Take, caller: Caller): Promise<Verdict> {
    const startedAt = clock.now()
    let result = first
    for (;;) {
      if (result.kind === 'ok') {
        metrics.rateLimited.inc({ rule: scope, reason: 'budget', action: 'delayed' })
        return GO_DELAYED
      }
      if (result.kind === 'cooldown') return refuse(scope, 'cooldown', result.ms)
      // Over budget: wait if it frees within RATE_LIMIT_MAX_WAIT_MS (all waits counted), else refuse at once.
      if (result.ms > maxWaitMs - (clock.now() - startedAt)) return refuse(scope, 'budget', result.ms)
      if (await sleep(result.ms, caller)) return GONE
      result = await take(scope, limits)
    }
  }

  /**
   * Whether the request may be sent now: synchronously GO on the common path (nothing
   * stands in the way, in memory), else a promise. One budget point per send.
   */
  function admit (rule: Rule | undefined, caller: Caller): Verdict | Promise<Verdict> {
    if (!active) return GO
    const scope = rule?.id ?? UPSTREAM_SCOPE
    const limits = rule?.limits ?? NO_LIMITS
    const first = take(scope, limits)
    if (!(first instanceof Promise)) return first.kind === 'ok' ? GO : settle(scope, limits, first, caller)
    return first.then((result) => result.kind === 'ok' ? GO : settle(scope, limits, result, caller))
  }

  /**
   * The gateway answered a request of this rule (undefined: none) with a rate-limit answer:
   * that scope cools down for its Retry-After (capped), or the backoff.
   */
  function rateLimitAnswer (rule: Rule | undefined, retryAfter: string | string[] | undefined): void {
    const scope = rule?.id ?? UPSTREAM_SCOPE
    metrics.rateLimitUpstreamAnswers.inc({ rule: scope })
    if (cooldownMs === 0) return
    const request = { retryAfterMs: retryAfterMs(retryAfter, clock.wallNow()), baseMs: cooldownMs, maxMs: cooldownMaxMs }
    // Kept in memory too, so a fallback keeps the cool-downs this sidecar started.
    const ms = memory.coolDown(scope, request)
    note(scope, ms)
    log.warn({ rule: scope, cooldownMs: ms, retryAfter: request.retryAfterMs !== undefined }, 'gateway rate-limit answer: cooling down')
    if (backend === 'redis' && redis !== undefined) {
      redis.coolDown(scope, request).then((shared) => { note(scope, shared) }, fallBack)
    }
  }

  return {
    /** Whether anything can stop a request (rules, or cool-downs on). */
    active,
    /** Whether a 500 is held back to look for Apigee's rate-limit error code. */
    watchesFaults: cooldownMs > 0,
    ruleFor: (method: string, url: string): Rule | undefined => matchRule(rules, method, url),
    admit,
    rateLimitAnswer,
    backend: () => backend,
    /** For /readyz: why limits are not shared although Redis is configured (still ready). */
    readinessNote (): string | undefined {
      if (redis === undefined || backend === 'redis') return undefined
      return `rate limits in memory per sidecar: redis ${redis.displayUrl} ${fellBack ? 'unreachable or too slow' : 'not reachable yet'}`
    },
    status (): RateLimitStatus {
      const now = clock.now()
      const wall = clock.wallNow()
      return {
        backend,
        redis: redis === undefined ? null : { url: redis.displayUrl, up: redisUp },
        rules: rules.map((r) => ({ rule: r.id, limits: r.limits.map((l) => l.text) })),
        cooldowns: [...known].filter(([, c]) => c.endsAt > now)
          .map(([rule, c]) => ({ rule, until: new Date(wall + (c.endsAt - now)).toISOString() }))
      }
    },
    /** Connects to Redis (when configured), for at most its timeout; never fails. */
    async start (): Promise<void> {
      if (redis === undefined) return
      redis.onState((up, err) => { if (up) recover(); else fallBack(err) })
      if (await redis.connect()) {
        recover()
        return
      }
      fellBack = true
      log.warn({ redis: redis.displayUrl },
        'rate-limit redis not reachable at start: budgets and cool-downs are per sidecar, in memory, until it answers')
      scheduleProbe()
    },
    async close (): Promise<void> {
      closed = true
      stopProbe?.()
      for (const c of known.values()) c.cancel()
      await redis?.close()
    }
  }
}

export type QuotaGuard = ReturnType<typeof createQuotaGuard>
