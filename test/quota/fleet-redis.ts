// The fleet's Redis side on a real redis-server, as the script tests drive it: the store (its
// clock read, ready for scripts with deadlines) and an operator's client to look at the keys.
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { systemClock } from '../../src/clock.js'
import type { Limit } from '../../src/config/rate-limit-rules.js'
import { createRedisStore, type Member, type RedisStore } from '../../src/quota/redis-backend.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'

export async function fleetRedis (t: Test, prefix: string, timeoutMs = 2_000): Promise<{ server: FaultyRedis, store: RedisStore, admin: Redis }> {
  const server = await startRedis(t)
  const store = createRedisStore({ url: server.url, timeoutMs, prefix, clock: systemClock })
  t.teardown(() => store.close())
  t.ok(await store.connect(), 'connected')
  await store.readClock()
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  return { server, store, admin }
}

/** A fleet of sidecars declaring sizes of their own, driven through the store's scripts. */
export interface SizedFleet {
  store: RedisStore
  admin: Redis
  /** A sidecar declaring `floor`; `ttlMs` short to let it lapse (cut off, perhaps spending alone). */
  member: (id: string, floor: number, ttlMs?: number) => Member
  /** Each joins in turn (all in one epoch); how many Redis counts present after the last. */
  join: (...members: Member[]) => Promise<number>
  beat: (...members: Member[]) => Promise<void>
  /** How many of `n` takes Redis admits for `m`, one after another. */
  admitted: (m: Member, limits: Limit[], n: number) => Promise<number>
  lapsed: () => Promise<string[]>
  floors: () => Promise<Record<string, string>>
}

/**
 * `newRun`: each join is a process's first (reassert's newRun), as a restart's would be.
 * `aloneSpanMs`: each member's (RATE_LIMIT_ALONE_MAX_MS + its longest window; 0: none, as an earlier version's).
 */
export async function sizedFleet (t: Test, prefix: string, { timeoutMs = 2_000, ttlMs = 60_000, newRun = false, scope = 'GET /r', aloneSpanMs = 0 } = {}): Promise<SizedFleet> {
  const { store, admin } = await fleetRedis(t, prefix, timeoutMs)
  let epoch = ''
  let sends = 0
  return {
    store,
    admin,
    member: (id, floor, memberTtlMs = ttlMs) => ({ id, presenceTtlMs: memberTtlMs, fleetFloor: floor, epoch, aloneSpanMs }),
    join: async (...members) => {
      let present = 0
      for (const m of members) {
        const reply = await store.reassert(m, [], 'e', newRun)
        epoch = m.epoch = reply.epoch
        present = reply.present
      }
      return present
    },
    beat: async (...members) => { for (const m of members) await store.heartbeat(m, []) },
    admitted: async (m, limits, n) => {
      let ok = 0
      for (let i = 0; i < n; i++) if ((await store.take(m, scope, limits, `s${sends++}`)).code === 'ok') ok++
      return ok
    },
    lapsed: async () => await admin.zrange(`${prefix}lapsed`, '0', '-1'),
    floors: async () => await admin.hgetall(`${prefix}floors`)
  }
}
