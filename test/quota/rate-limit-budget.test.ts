// What the guard says is left of a budget (RateLimit fields, the remaining-budget gauges),
// nothing taken: the PEEK script on a real redis-server (the fleet's tally as a take counts it),
// and the fleet store's policy on the scripted Redis: the tally while shared, this sidecar's
// share while cut off, none while it would refuse alone. The fields themselves:
// test/rate-limit-fields/.
import t from 'tap'
import { systemClock, type Clock } from '../../src/clock.js'
import type { Limit } from '../../src/config/rate-limit-rules.js'
import { createRedisStore, type Member, type PeekedLimit, type RedisStore } from '../../src/quota/redis-backend.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { gate, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const SCOPE = 'GET /a'
const HOUR_MS = 3_600_000
const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })
const CLOSED = new Error('Connection is closed.')

t.test('PEEK reads what a take would find, and takes nothing', async (t) => {
  const server = await startRedis(t)
  const clock: Clock = systemClock
  const store = createRedisStore({ url: server.url, timeoutMs: 2_000, prefix: 'peek:', clock })
  t.teardown(() => store.close())
  t.ok(await store.connect())
  const member: Member = { id: 'm1', presenceTtlMs: 60_000, fleetFloor: 0, epoch: '' }
  t.equal(await store.peek('', 0, SCOPE, [limit(3, HOUR_MS)]), undefined, 'no epoch yet: nothing to read')
  member.epoch = (await store.reassert(member, [], 'e1')).epoch
  const limits = [limit(3, HOUR_MS), limit(10, 300)]
  t.same(await store.peek(member.epoch, 0, SCOPE, limits), [{ left: 3, resetMs: 0 }, { left: 10, resetMs: 0 }], 'nothing sent: all of it')
  t.equal(await store.peek('another', 0, SCOPE, limits), undefined, 'not the epoch this sidecar knows: Redis lost or changed its data')
  t.match(await store.take(member, SCOPE, limits, 's1'), { code: 'ok' })
  t.match(await store.take(member, SCOPE, limits, 's2'), { code: 'ok' })
  const [hour, short] = await store.peek(member.epoch, 0, SCOPE, limits) as PeekedLimit[]
  t.equal(hour?.left, 1)
  t.ok((hour?.resetMs ?? 0) > HOUR_MS - 60_000 && (hour?.resetMs ?? 0) <= HOUR_MS, `the oldest leaves within the hour (${hour?.resetMs} ms)`)
  t.equal(short?.left, 8)
  t.same((await store.peek(member.epoch, 0, SCOPE, limits))?.map((l) => l.left), [1, 8], 'a peek takes nothing')
  t.match(await store.take(member, SCOPE, limits, 's3'), { code: 'ok' }, 'the last one is there for a take')
  t.equal((await store.peek(member.epoch, 0, SCOPE, limits))?.[0]?.left, 0, 'then none')

  // Three declared, this one present: a take keeps the shares of the two absent ones.
  const nine = [limit(9, HOUR_MS)]
  t.same((await store.peek(member.epoch, 3, SCOPE, nine))?.map((l) => l.left), [3], 'room for 9 − 2 × ⌊9 / 3⌋')
  for (const id of ['n1', 'n2']) t.match(await store.take({ ...member, fleetFloor: 3 }, SCOPE, nine, id), { code: 'ok' })
  t.same((await store.peek(member.epoch, 3, SCOPE, nine))?.map((l) => l.left), [1], 'less what was sent')
  t.match(await store.take({ ...member, fleetFloor: 3 }, SCOPE, nine, 'n3'), { code: 'ok' })
  const spent = await store.peek(member.epoch, 3, SCOPE, nine)
  t.equal(spent?.[0]?.left, 0, '3 sent, 3 of room: none')
  t.ok((spent?.[0]?.resetMs ?? 0) > HOUR_MS - 60_000, 'until the oldest leaves')

  await store.coolDown(SCOPE, { retryAfterMs: 30_000, baseMs: 1_000, maxMs: 60_000 })
  const cooling = await store.peek(member.epoch, 0, SCOPE, [limit(100, 1_000)])
  t.equal(cooling?.[0]?.left, 0, 'cooling down: none')
  t.ok((cooling?.[0]?.resetMs ?? 0) > 25_000, `until the cool-down ends (${cooling?.[0]?.resetMs} ms)`)

  // Redis lost its data: every limit gated for its window.
  await server.restart({ withData: false })
  await eventually(t, 'connected again', async () => await store.ping())
  const told = await store.reassert(member, [{ scope: 'GET /c', limit: limit(5, HOUR_MS), sends: [] }], 'e2')
  t.ok(told.lost)
  member.epoch = told.epoch
  const gated = await store.peek(member.epoch, 0, 'GET /c', [limit(5, HOUR_MS)])
  t.equal(gated?.[0]?.left, 0, 'gated after a loss: none')
  t.ok((gated?.[0]?.resetMs ?? 0) > HOUR_MS - 60_000, 'for the window')
})

/** The scripted Redis's PEEK: `answer` (or a failure). */
function scriptPeek (redis: RedisStore, answer: () => Promise<PeekedLimit[] | undefined>): string[] {
  const asked: string[] = []
  Object.assign(redis, { peek: async (epoch: string, floor: number, scope: string) => { asked.push(`${epoch} ${floor} ${scope}`); return await answer() } })
  return asked
}

t.test('the fleet store: the tally while shared; cut off, its share from one window after its last presence, none before', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 6/1s')
  const asked = scriptPeek(f.double.redis, async () => [{ left: 4, resetMs: 700 }])
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 4, resetMs: 700 }], 'the fleet\'s tally')
  t.same(asked, ['e:1 2 GET /a'], 'read with the epoch it knows and the declared size')

  scriptPeek(f.double.redis, async () => undefined)
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 0, resetMs: TIMEOUT_MS + TIMING.presenceTtlMs + 1_000 }],
    'another epoch: what it may spend alone, none while Redis may still count it present')
  scriptPeek(f.double.redis, async () => { throw CLOSED })
  t.same((await f.store.budget(f.rule.id, f.rule.limits))[0]?.left, 0, 'a failed read: likewise')
  t.equal(f.store.status().state, 'shared', 'a failed read changes nothing by itself')

  f.double.script.down = CLOSED
  t.match(await f.take(), { kind: 'degraded' })
  const cutAt = f.c.clock.now()
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 0, resetMs: TIMEOUT_MS + TIMING.presenceTtlMs + 1_000 }], 'cut off: none for a window')
  await f.c.tick(cutAt + TIMEOUT_MS + TIMING.presenceTtlMs + 1_000 - f.c.clock.now())
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 3, resetMs: 0 }], 'then ⌊6 / 2⌋')
  t.match(await f.take(), { kind: 'ok' })
  t.match(await f.take(), { kind: 'ok' })
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 1, resetMs: 1_000 }], 'less what it sent alone; the oldest leaves in a second')
  t.match(await f.take(), { kind: 'ok' })
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 0, resetMs: 1_000 }], 'its share spent: room when the oldest leaves')

  f.store.coolDown(f.rule.id, { retryAfterMs: 5_000, baseMs: 1_000, maxMs: 60_000 })
  t.same(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 0, resetMs: 5_000 }], 'cooling down: none until it ends')
})

t.test('the fleet store: none without a declared size, while its ledger is told to Redis, or before a fleet of one\'s earlier run is out', async (t) => {
  const undeclared = await scriptedFleet(t, 'GET /a 4/1s', { fleetFloor: 0 })
  undeclared.double.script.down = CLOSED
  undeclared.double.emit(false, CLOSED)
  await undeclared.c.tick(10_000)
  t.same(await undeclared.store.budget(undeclared.rule.id, undeclared.rule.limits), [{ left: 0, resetMs: TIMING.heartbeatMs }], 'share 0: none; asked again within a heartbeat')

  const one = await scriptedFleet(t, 'GET /a 4/1s', { fleetFloor: 1, before: (s) => { s.fleetSize = 1; s.present = 1 } })
  one.double.script.down = CLOSED
  one.double.emit(false, CLOSED)
  t.same(await one.store.budget(one.rule.id, one.rule.limits), [{ left: 0, resetMs: 1_000 }], 'an earlier run may have spent within the window')
  await one.c.tick(2_000)
  t.same(await one.store.budget(one.rule.id, one.rule.limits), [{ left: 4, resetMs: 0 }], 'a declared fleet of one: the whole limit')
  const held = gate()
  one.double.script.hold.reassert = held.promise
  one.double.script.down = undefined
  one.double.emit(true)
  await one.c.tick(0)
  t.same(await one.store.budget(one.rule.id, one.rule.limits), [{ left: 0, resetMs: TIMING.heartbeatMs }], 'telling Redis its ledger: none meanwhile')
  held.open()
  await one.c.tick(0)
})
