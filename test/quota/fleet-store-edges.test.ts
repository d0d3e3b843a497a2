// The edges of the fleet store's own choices: which take replies renew this sidecar's presence
// (the bound on spending alone counts from the last one), and what a restart keeping its member
// id tells Redis: whether it vouches for its earlier run (a ledger file whole), and whose
// names its sends carry. (The scripted Redis: fleet-double.ts; a real one: fleet-redis.ts.)
import pino from 'pino'
import t, { type Test } from 'tap'
import { systemClock } from '../../src/clock.js'
import { parseRules, type Rule } from '../../src/config/rate-limit-rules.js'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore, type FleetStoreOptions } from '../../src/quota/fleet-store.js'
import { createRedisStore } from '../../src/quota/redis-backend.js'
import type { Store } from '../../src/quota/store.js'
import { scriptedFleet, takeAndSend } from './fleet-double.js'
import { fleetRedis } from './fleet-redis.js'

const CLOSED = new Error('Connection is closed.')
const BOUND_MS = 5_000

t.test('a take Redis answered renews presence, one answered late or in another epoch does not: the bound on spending alone counts from the last one answered', async (t) => {
  for (const code of ['late', 'epoch'] as const) {
    // Heartbeats answered late from the start: only the takes can renew.
    const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS, before: (s) => { s.heartbeat = () => ({ code: 'late' }) } })
    await f.c.tick(1_000)
    const answeredAt = f.c.clock.now()
    t.match(await f.take(), { kind: 'ok' }, `${code}: a take Redis answered`)
    await f.c.tick(1_000)
    // Redis gone once it replied (the PING, a reassertion fail): this sidecar decides alone.
    f.double.script.take = () => { f.double.script.down = CLOSED; return { code } }
    t.match(await f.take(), { kind: 'degraded' }, `${code}: a take answered ${code}: cut off`)
    t.equal(f.store.status().state, 'degraded')
    await f.c.tick(answeredAt + BOUND_MS - 1 - f.c.clock.now())
    t.notOk(f.store.status().aloneEnded, `${code}: 1 ms within the bound counted from the take answered`)
    await f.c.tick(1)
    t.ok(f.store.status().aloneEnded, `${code}: the bound reached, counted from the take answered, not the one answered ${code}`)
  }
})

const rule = parseRules('GET /v 4/1h', 'RATE_LIMITS').rules[0] as Rule

/** A sidecar of a fleet of 2 on a real Redis (keys under `prefix`), started. */
async function member (t: Test, url: string, prefix: string, kept: Pick<FleetStoreOptions, 'memberId' | 'ledgerWhole'> = {}) {
  const store = createFleetStore({
    redis: createRedisStore({ url, timeoutMs: 2_000, prefix, clock: systemClock }),
    clock: systemClock,
    log: pino({ level: 'silent' }),
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: [rule],
    redisTimeoutMs: 2_000,
    fleetFloor: 2,
    timing: { freshGraceMs: 0 },
    onCooldown: () => {},
    ...kept
  })
  await store.start()
  t.teardown(() => store.close())
  return store
}

/** How many of `n` sends `store` makes in a row (each leaving at once). */
async function sends (store: Store, n: number): Promise<number> {
  let sent = 0
  for (let i = 0; i < n; i++) if ((await takeAndSend(store, rule.id, rule.limits)).kind === 'ok') sent++
  return sent
}

t.test('a restart keeping its member id vouches for its earlier run only with its ledger file whole: then the fleet has the whole budget at once, else the earlier run\'s share stays held a window', async (t) => {
  for (const [ledgerWhole, expected] of [[true, 4], [false, 2]] as const) {
    const prefix = `whole-${ledgerWhole}:`
    const { server, store: redis, admin } = await fleetRedis(t, prefix)
    // A's earlier run was present and crashed (a TTL of 0: lapsed by the next script); B is present.
    await redis.reassert({ id: 'member-a', presenceTtlMs: 0, fleetFloor: 2, epoch: '', aloneSpanMs: 0 }, [], 'e', true)
    await redis.reassert({ id: 'member-b', presenceTtlMs: 60_000, fleetFloor: 2, epoch: '', aloneSpanMs: 0 }, [], 'e', true)
    t.same(await admin.zrange(`${prefix}lapsed`, '0', '-1'), ['member-a'], `whole ${ledgerWhole}: A's earlier run lapsed, perhaps spending alone`)
    const again = await member(t, server.url, prefix, { memberId: 'member-a', ledgerWhole })
    t.equal(await sends(again, 4), expected, ledgerWhole
      ? 'whole: its file holds every send the earlier run made alone, its lapse ends: the whole budget (B sent nothing)'
      : 'not whole: the earlier run may have sent alone what the file lacks: its share held')
    t.equal((await admin.zrange(`${prefix}released`, '0', '-1')).length, ledgerWhole ? 0 : 1, ledgerWhole ? 'nothing held' : 'released by the count: held a window')
  }
})

t.test('a send in Redis\'s logs names the sidecar that made it, but for a member id kept from an earlier run (whose sends had those names)', async (t) => {
  const { server, admin } = await fleetRedis(t, 'fresh:')
  const fresh = await member(t, server.url, 'fresh:')
  const kept = await member(t, server.url, 'kept:', { memberId: 'member-a' })
  t.equal(await sends(fresh, 1), 1)
  t.equal(await sends(kept, 1), 1)
  const logged = async (prefix: string): Promise<string[]> => {
    const [log] = await admin.keys(`${prefix}log:*`)
    return log === undefined ? [] : await admin.zrange(log, '0', '-1')
  }
  const [id] = await admin.zrange('fresh:members', '0', '-1')
  t.same(await logged('fresh:'), [`${id}:0`], 'its first send, named by the sidecar Redis counts present')
  const [send] = await logged('kept:')
  t.ok(send !== undefined && !send.startsWith('member-a:'), 'kept: named otherwise (member-a:0 may be the earlier run\'s first send: the two would count as one)')
})
