// The quiet edges of the fleet's quota, where the broader tests look elsewhere: what Redis's
// scripts tell a member of the sizes on record, which of the Redis store's calls send nothing,
// how long a released sidecar is remembered; what the fleet store keeps (its problem, its entry
// in Redis) when Redis drops or it closes while not shared, and which renewal the bound on
// spending alone counts from; the guard's cool-down gauge and its budget without Redis.
import pino from 'pino'
import t, { type Test } from 'tap'
import { systemClock, type Clock } from '../../src/clock.js'
import { parseRules, type Limit } from '../../src/config/rate-limit-rules.js'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore } from '../../src/quota/fleet-store.js'
import type { Caller } from '../../src/quota/guard.js'
import { createRedisStore } from '../../src/quota/redis-backend.js'
import { downPort } from '../helpers/recording-proxy.js'
import { startRedis } from '../helpers/redis.js'
import { gate, scriptedFleet } from './fleet-double.js'
import { guardConfig, guardOnFakeClock, WALL_START } from './guard-config.js'
import { sizedFleet } from './fleet-redis.js'

const LIMIT: Limit = { count: 4, windowMs: 60_000, text: '4/60000ms' }
const DAY = 24 * 3_600_000
const CLOSED = new Error('Connection is closed.')

/** A Redis store on a loopback port where nothing listens, never connected: every command it sends fails. */
async function unreachable (t: Test) {
  const store = createRedisStore({ url: `redis://127.0.0.1:${await downPort()}`, timeoutMs: 200, prefix: 'quiet:', clock: systemClock })
  t.teardown(() => store.close())
  return store
}

t.test('each script Redis runs tells the member the sizes declared on record; one answered in another epoch tells none, and the member keeps those it had', async (t) => {
  const f = await sizedFleet(t, 'sizes:')
  const a = f.member('a', 2)
  await f.join(a)
  t.same(a.sizes, { lo: 2, hi: 2 }, 'its reassertion: its own declaration, the only one')
  const b = f.member('b', 5)
  await f.join(b)
  t.same(b.sizes, { lo: 2, hi: 5 }, 'a reassertion tells every declaration present')
  t.equal((await f.store.take(a, 'GET /r', [LIMIT], 'a:1')).code, 'ok')
  t.same(a.sizes, { lo: 2, hi: 5 }, 'a take tells a the size b declared since')
  const stale = { ...a, epoch: 'an-epoch-lost' }
  t.equal((await f.store.take(stale, 'GET /r', [LIMIT], 'a:2')).code, 'epoch')
  t.same(stale.sizes, { lo: 2, hi: 5 }, 'a take in another epoch: the sizes known are kept')
  t.equal((await f.store.heartbeat(stale, [])).code, 'epoch')
  t.same(stale.sizes, { lo: 2, hi: 5 }, 'a heartbeat in another epoch: likewise')
})

t.test('a refund or a departure with nothing to tell (no limits, or no send) sends no command: it resolves while Redis is unreachable', async (t) => {
  const store = await unreachable(t)
  await t.resolves(store.refund('GET /r', [], 'x:1'), 'a refund of no limits')
  await t.resolves(store.leaving('GET /r', [], 'x:1'), 'sends leaving under no limits')
  await t.resolves(store.leaving('GET /r', [LIMIT]), 'no send leaving')
  await t.rejects(store.leaving('GET /r', [LIMIT], 'x:1'), 'a send to tell: a command, which fails')
  await t.rejects(store.refund('GET /r', [LIMIT], 'x:1'), 'a refund to tell: likewise')
})

t.test('a PING before the first connection answers false without opening one: connect() then makes it', async (t) => {
  const server = await startRedis(t)
  const store = createRedisStore({ url: server.url, timeoutMs: 2_000, prefix: 'ping:', clock: systemClock })
  t.teardown(() => store.close())
  t.equal(await store.ping(), false, 'not connected: not answering')
  t.equal(await store.connect(), true, 'connect() makes the first connection')
  t.equal(await store.ping(), true, 'then Redis answers')
})

t.test('a released sidecar is remembered for a week: one released a day ago is kept', async (t) => {
  const f = await sizedFleet(t, 'ghost:')
  const b = f.member('b', 2)
  await f.join(b)
  const [seconds, micros] = await f.admin.time()
  const dayAgo = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) - DAY
  await f.admin.zadd('ghost:released', dayAgo, 'yesterday')
  await f.beat(b)
  t.same(await f.admin.zrange('ghost:released', '0', '-1'), ['yesterday'], 'a lapsed entry may still stand for it')
})

t.test('a sidecar that never reached Redis says "not reachable" in /status while its reconnections keep failing', async (t) => {
  const redis = await unreachable(t)
  // Each report of the connection going down, as the fleet store hears it.
  let downs = 0
  let down: () => void = () => {}
  const onState = redis.onState
  redis.onState = (fn) => { onState((up, err) => { fn(up, err); if (!up) { downs++; down() } }) }
  const store = createFleetStore({
    redis,
    clock: systemClock,
    log: pino({ level: 'silent' }),
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: parseRules('GET /r 4/1m', 'RATE_LIMITS').rules,
    redisTimeoutMs: 200,
    fleetFloor: 2,
    onCooldown: () => {}
  })
  t.teardown(() => store.close())
  await store.start()
  t.match(store.status(), { state: 'connecting', problem: 'not reachable' })
  const before = downs
  await new Promise<void>((resolve) => { down = resolve })
  t.ok(downs > before, 'a reconnection failed since')
  t.match(store.status(), { state: 'connecting', problem: 'not reachable' }, 'the reason stands: no failed reconnection rewrites it')
})

t.test('a sidecar closing while not shared does not leave Redis: its entry lapses, its share stays held; shared, it leaves', async (t) => {
  const shared = await scriptedFleet(t, 'GET /a 4/1s')
  await shared.store.close()
  t.equal(shared.double.count('leave'), 1, 'shared: Redis has every send of it, it leaves')

  // Redis answers, but late: cut off, the sidecar may spend alone.
  const late = await scriptedFleet(t, 'GET /a 4/1s')
  late.double.script.take = () => ({ code: 'late' })
  late.double.script.reassert = () => ({ late: true })
  t.match(await late.take(), { kind: 'degraded' })
  t.equal(late.store.status().state, 'degraded')
  await late.store.close()
  t.equal(late.double.count('leave'), 0, 'cut off: no leave')

  // Redis connected again: the ledger is being told it.
  const telling = await scriptedFleet(t, 'GET /a 4/1s')
  telling.double.script.hold.reassert = gate().promise
  telling.double.emit(true)
  await telling.store.close()
  t.equal(telling.double.count('leave'), 0, 'reasserting: no leave either')
})

t.test('the bound on spending alone counts from the first script answered of those sent at one moment: a wall-clock step between them counts towards it', async (t) => {
  const BOUND_MS = 5_000
  const STEP_MS = 2_000
  // Heartbeats answered late: only the takes renew.
  const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS, before: (s) => { s.heartbeat = () => ({ code: 'late' }) } })
  await f.c.tick(1_000)
  const first = f.take()
  f.c.stepWall(STEP_MS)
  const second = f.take()
  t.match(await Promise.all([first, second]), [{ kind: 'ok' }, { kind: 'ok' }], 'both sent at one monotonic moment, answered in turn')
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  t.equal(f.store.status().state, 'degraded')
  f.c.suspend(BOUND_MS - STEP_MS - 1)
  t.notOk(f.store.status().aloneEnded, 'the wall clock 1 ms short of the bound past the first send')
  f.c.suspend(1)
  t.ok(f.store.status().aloneEnded, 'the bound reached by the wall clock, counted from the first send: the second, no later, renewed nothing')
})

/** A guard without Redis on a fake clock; `armed()`: how many timers it has set. */
function guardAlone (t: Test, rules: string) {
  let armed = 0
  const counting = (clock: Clock): Clock => ({ ...clock, setTimer: (fn, ms) => { armed++; return clock.setTimer(fn, ms) } })
  const { c, guard, gauge } = guardOnFakeClock(guardConfig(rules, { maxWaitMs: 0 }), { clock: counting, log: pino({ level: 'silent' }) })
  t.teardown(() => guard.close())
  const tooMany = (retryAfter: string) => { guard.answered(guard.ruleFor('GET', '/a'), { statusCode: 429, headers: { 'retry-after': retryAfter } }) }
  return { c, guard, gauge, tooMany, armed: () => armed }
}

const caller: Caller = { destroyed: false, once: () => undefined, removeListener: () => undefined }

t.test('a cool-down\'s gauge is set once: refusals during it and the same end met again (within 1 ms) change nothing; a later end moves it', async (t) => {
  const { c, guard, gauge, tooMany, armed } = guardAlone(t, 'GET /a 5/1s')
  tooMany('3')
  t.equal(armed(), 1, 'the gauge\'s reset is armed')
  t.equal(await gauge('GET /a'), (WALL_START + 3_000) / 1000)
  for (let i = 0; i < 3; i++) t.match(await guard.admit(guard.ruleFor('GET', '/a'), caller), { ok: false, reason: 'cooldown' })
  await c.tick(1)
  tooMany('3')
  t.equal(armed(), 1, 'refusals, and a Retry-After ending 1 ms later: the same cool-down, nothing re-armed')
  t.equal(await gauge('GET /a'), (WALL_START + 3_000) / 1000)
  tooMany('10')
  t.equal(armed(), 2, 'a longer Retry-After: re-armed')
  t.equal(await gauge('GET /a'), Math.round((WALL_START + 10_001) / 1000), 'the gauge shows the new end')
})

t.test('without Redis, the budget is the ledger\'s, but none while the rule cools down, until its end', async (t) => {
  const { c, guard, tooMany } = guardAlone(t, 'GET /a 5/1s')
  const rule = guard.ruleFor('GET', '/a')
  if (rule === undefined) throw new Error('no rule')
  t.strictSame(await guard.budget(rule), [{ left: 5, resetMs: 0 }], 'no cool-down: the whole budget')
  tooMany('3')
  t.strictSame(await guard.budget(rule), [{ left: 0, resetMs: 3_000 }], 'cooling down: nothing left until its end')
  await c.tick(3_000)
  t.strictSame(await guard.budget(rule), [{ left: 5, resetMs: 0 }], 'the cool-down over: the whole budget again')
})
