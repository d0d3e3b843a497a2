// A fleet store on the system clock over the real scripts on a real redis-server, for tests
// where what happens between two real moments is the point (a send leaving late). Presence
// lasts a minute, so real time between steps never lapses a member. `wrap` may stand between
// the store and Redis (a slow reply, say).
import pino from 'pino'
import type { Test } from 'tap'
import { systemClock } from '../../src/clock.js'
import type { Rule } from '../../src/config/rate-limit-rules.js'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore } from '../../src/quota/fleet-store.js'
import { createRedisStore, type RedisStore } from '../../src/quota/redis-backend.js'
import type { Store } from '../../src/quota/store.js'

export async function realTimeMember (t: Test, url: string, prefix: string, rule: Rule, wrap = (redis: RedisStore): RedisStore => redis) {
  return await member(t, url, prefix, rule, wrap, { timeoutMs: 5_000, presenceTtlMs: 60_000 })
}

async function member (t: Test, url: string, prefix: string, rule: Rule, wrap: (redis: RedisStore) => RedisStore, { timeoutMs, presenceTtlMs }: { timeoutMs: number, presenceTtlMs: number }) {
  const store = createFleetStore({
    redis: wrap(createRedisStore({ url, timeoutMs, prefix, clock: systemClock })),
    clock: systemClock,
    log: pino({ level: 'silent' }),
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: [rule],
    redisTimeoutMs: timeoutMs,
    fleetFloor: 2,
    timing: { heartbeatMs: 1_000, presenceTtlMs, freshGraceMs: 0 },
    onCooldown: () => {}
  })
  await store.start()
  t.teardown(() => store.close())
  return store
}

/** A Redis every call of which fails once cut (a partition), as ioredis's would after its timeout; `heal` undoes it. */
export function cuttable (redis: RedisStore): { redis: RedisStore, cut: () => void, heal: () => void } {
  let cut = false
  const proxy = new Proxy(redis, {
    get (target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (typeof value !== 'function' || !CALLS.has(prop)) return value
      return async (...args: unknown[]) => {
        if (cut && prop === 'ping') return false
        if (cut) throw new Error('cut off')
        return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
      }
    }
  })
  return { redis: proxy, cut: () => { cut = true }, heal: () => { cut = false } }
}
const CALLS = new Set<string | symbol>(['take', 'reassert', 'heartbeat', 'peek', 'leave', 'refund', 'leaving', 'coolDown', 'ping', 'readClock'])

/**
 * A member with the fleet's own timing (presence 3 s, a 200 ms timeout): cut off, it lapses and
 * decides alone as in production.
 */
export async function fleetMember (t: Test, url: string, prefix: string, rule: Rule, wrap = (redis: RedisStore): RedisStore => redis) {
  return await member(t, url, prefix, rule, wrap, { timeoutMs: 200, presenceTtlMs: 3_000 })
}

/** Polls `ok` every 20 ms until it holds; fails naming `what` after `ms`. */
export async function until (what: string, ok: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = performance.now() + ms
  while (!(await ok())) {
    if (performance.now() > end) throw new Error(`never: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** A caller every 20 ms until `endsAt` (performance.now()), each sent as soon as admitted: when each reached TI. */
export async function spendUntil (store: Pick<Store, 'take' | 'leaving'>, rule: Rule, endsAt: number, arrivals: number[]): Promise<void> {
  while (performance.now() < endsAt) {
    const taken = await store.take(rule.id, rule.limits)
    if (taken.kind === 'ok' && store.leaving(rule.id, rule.limits, taken.id) === undefined) arrivals.push(performance.now())
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}
