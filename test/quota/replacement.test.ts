// A sidecar replaced while cut off, on a real redis-server: what its lapse leaves behind and
// what the sidecar that takes its place holds back. A sidecar cut off spends its share alone
// from one window after its presence lapsed; should a new pod replace it, those sends are
// known to no one. The promise: the newcomer's arrival does not free that share until every
// such send is outside the window; a sidecar that left cleanly, came back, or lapsed less than
// a window before the arrival (and so never spent alone) costs nothing.
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { systemClock } from '../../src/clock.js'
import { createRedisStore, GHOST_KEEP_MS, type Member, type RedisStore } from '../../src/quota/redis-backend.js'
import type { Limit } from '../../src/config/rate-limit-rules.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'

const PREFIX = 'replace:'
const HOUR_MS = 3_600_000
const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })
// A fleet of 2 declared, 2/1h: a share of 1 each.
const FLOOR = 2
const HOURLY = limit(2, HOUR_MS)

interface Fleet {
  store: RedisStore
  admin: Redis
  /** A member of a fleet of FLOOR; `ttlMs` short to let it lapse. */
  member: (name: string, opts?: { ttlMs?: number, fresh?: boolean }) => Member
  join: (m: Member) => Promise<number>
  /** Redis's clock, ms. */
  redisNow: () => Promise<number>
  lapsed: () => Promise<string[]>
}

async function fleet (t: Test, server: FaultyRedis): Promise<Fleet> {
  const store = createRedisStore({ url: server.url, timeoutMs: 2_000, prefix: PREFIX, clock: systemClock })
  t.teardown(() => store.close())
  t.ok(await store.connect(), 'connected')
  await store.readClock()
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  let epoch = ''
  return {
    store,
    admin,
    member: (name, { ttlMs = 60_000, fresh = true } = {}) => ({ id: name, presenceTtlMs: ttlMs, fleetFloor: FLOOR, epoch, fresh }),
    join: async (m) => {
      const reply = await store.reassert(m, [], 'e')
      epoch = reply.epoch
      m.epoch = epoch
      m.fresh = false
      return reply.present
    },
    redisNow: async () => {
      const [s, us] = await admin.time()
      return Number(s) * 1000 + Math.floor(Number(us) / 1000)
    },
    lapsed: async () => await admin.zrange(`${PREFIX}lapsed`, '0', '-1')
  }
}

/** A fleet on a new Redis, with `b` present (a share of 1 in 2/1h). */
async function withB (t: Test): Promise<{ f: Fleet, b: Member }> {
  const f = await fleet(t, await startRedis(t))
  const b = f.member('b')
  await f.join(b)
  return { f, b }
}

/** How many of `n` takes of `limits` Redis admits for `m`, one after another. */
async function admitted (store: RedisStore, m: Member, scope: string, limits: Limit[], n: number): Promise<number> {
  let ok = 0
  for (let i = 0; i < n; i++) if ((await store.take(m, scope, limits, `${m.id}-${scope}-${i}`)).code === 'ok') ok++
  return ok
}

t.test('a sidecar that lapses is remembered, with when it lapsed; coming back under its own id forgets it', async (t) => {
  const server = await startRedis(t)
  const f = await fleet(t, server)
  const a = f.member('a', { ttlMs: 30 })
  const b = f.member('b')
  await f.join(a)
  await f.join(b)
  // Waiting out a presence TTL on Redis's own clock: more time only makes it more lapsed.
  await sleep(100)
  t.match(await f.store.heartbeat(b, []), { code: 'ok', present: 1, fleetSize: FLOOR })
  t.same(await f.lapsed(), ['a'], 'a, not heard from for its TTL, is remembered as lapsed')
  const score = Number(await f.admin.zscore(`${PREFIX}lapsed`, 'a'))
  t.ok(score <= await f.redisNow() && score > await f.redisNow() - 10_000, 'scored with its lapse, on Redis\'s clock')
  t.equal(await f.admin.pttl(`${PREFIX}lapsed`), -1, 'no TTL: a volatile maxmemory-policy never evicts it (pruned by score, below)')
  a.presenceTtlMs = 60_000
  t.equal(await f.join(a), 2, 'a comes back (it tells its ledger: its id, not fresh)')
  t.same(await f.lapsed(), [], 'and is no longer a lapsed sidecar')
  t.same(await f.admin.zrange(`${PREFIX}newcomers`, '0', '-1'), [], 'nor a newcomer')
})

t.test('a new sidecar in the place of one that lapsed more than a window before holds back its share for one window', async (t) => {
  const { f, b } = await withB(t)
  // `a` lapsed an hour and a minute ago (cut off since): it may have spent its share alone
  // in the last hour, then been replaced.
  await f.admin.zadd(`${PREFIX}lapsed`, await f.redisNow() - HOUR_MS - 60_000, 'a')
  const fresh = f.member('a2')
  t.equal(await f.join(fresh), 2, 'the new pod joins')
  t.same(await f.lapsed(), [], 'in a\'s place')
  t.equal(await admitted(f.store, b, 'GET /hourly', [HOURLY], 3), 1, 'one of 2 in the hour: a\'s share is held back')
  const peeked = await f.store.peek(b.epoch, FLOOR, 'GET /hourly', [HOURLY])
  t.match(peeked, [{ left: 0 }], 'and the RateLimit fields say so')
  // The same arrival, a limit of 2 in 300 ms: held for that window only.
  const short = limit(2, 300)
  await eventually(t, 'the hold ends one window after the arrival', async () => {
    const [left] = await f.store.peek(b.epoch, FLOOR, 'GET /short', [short]) ?? []
    return left?.left === 2
  })
  t.equal(await admitted(f.store, b, 'GET /short', [short], 3), 2, 'then the whole limit')
})

t.test('no hold where the lapsed sidecar could not have spent alone, or left, or came back', async (t) => {
  for (const [name, setUp] of [
    ['lapsed within a window of the arrival: it never spent alone', async (f: Fleet) => {
      await f.admin.zadd(`${PREFIX}lapsed`, await f.redisNow() - 60_000, 'a')
    }],
    ['left cleanly (stopped while shared: every send of it is in Redis)', async (f: Fleet, t: Test) => {
      const a = f.member('a', { ttlMs: 30 })
      await f.join(a)
      await f.store.leave(a)
      await sleep(100)
      t.equal((await f.store.heartbeat(f.member('b'), [])).present, 1, 'a is gone at once')
      t.same(await f.lapsed(), [], 'and not remembered as lapsed')
    }],
    ['restarted with its ledger (the same id, not fresh)', async (f: Fleet) => {
      await f.admin.zadd(`${PREFIX}lapsed`, await f.redisNow() - HOUR_MS - 60_000, 'a')
      const back = f.member('a', { fresh: false })
      await f.join(back)
    }]
  ] as const) {
    await t.test(name, async (t) => {
      const { f, b } = await withB(t)
      await setUp(f, t)
      await f.join(f.member('a2'))
      t.equal(await admitted(f.store, b, 'GET /hourly', [HOURLY], 3), 2, 'the whole limit')
    })
  }
})

t.test('a restart that keeps its id takes no one\'s place; a fresh one takes the oldest lapsed, one each', async (t) => {
  const { f, b } = await withB(t)
  const now = await f.redisNow()
  await f.admin.zadd(`${PREFIX}lapsed`, now - 3 * HOUR_MS, 'old', now - 2 * HOUR_MS, 'older-not')
  await f.join(f.member('restarted', { fresh: false }))
  t.same(await f.lapsed(), ['old', 'older-not'], 'not fresh: nothing taken')
  await f.join(f.member('new1'))
  t.same(await f.lapsed(), ['older-not'], 'the oldest lapse is taken first')
  const [arrival] = await f.admin.zrange(`${PREFIX}newcomers`, '0', '-1')
  t.match(arrival, /^new1\|\d+$/, 'the newcomer records whose lapse it took')
  await f.join(f.member('new2'))
  t.same(await f.lapsed(), [], 'one each')
  // Fleet of 2 declared, 4 present: size 4, and two held shares of ⌊2/2⌋: nothing left.
  t.equal(await admitted(f.store, b, 'GET /hourly', [HOURLY], 1), 0, 'both shares held back')
})

t.test('lapsed sidecars and arrivals are forgotten after GHOST_KEEP_MS', async (t) => {
  const { f, b } = await withB(t)
  await f.admin.zadd(`${PREFIX}lapsed`, await f.redisNow() - GHOST_KEEP_MS - 1_000, 'ancient')
  await f.admin.zadd(`${PREFIX}newcomers`, await f.redisNow() - GHOST_KEEP_MS - 1_000, 'x|0')
  await f.store.heartbeat(b, [])
  t.same(await f.lapsed(), [])
  t.same(await f.admin.zrange(`${PREFIX}newcomers`, '0', '-1'), [])
})
