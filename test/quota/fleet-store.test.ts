// The fleet store's policy on a fake clock, with Redis replaced by a scripted double: what a
// sidecar may spend alone, and when. (test/quota/redis.test.ts and test/quota/model/ run the
// real scripts on a real Redis.)
import t, { type Test } from 'tap'
import pino from 'pino'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore } from '../../src/quota/fleet-store.js'
import { reconnectDelayMs, RECONNECT_MAX_MS } from '../../src/redis/connection.js'
import { type Member, type RedisStore, type ReassertLimit, type TakeReply } from '../../src/quota/redis-backend.js'
import { parseRules, type Rule } from '../../src/config/rate-limit-rules.js'
import type { Take } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { takeAndSend } from './fleet-double.js'

const TIMEOUT_MS = 100
const TIMING = { heartbeatMs: 200, presenceTtlMs: 600, freshGraceMs: 0 }

function rulesOf (text: string): Rule[] {
  const { rules, problems } = parseRules(text, 'RATE_LIMITS')
  if (problems.length > 0) throw new Error(problems.join('\n'))
  return rules
}

/** A Redis double: `answer` decides each take; `up` false makes every command fail. */
function fakeRedis () {
  const calls: string[] = []
  const reasserted: ReassertLimit[][] = []
  const refunded: string[] = []
  const state = {
    up: true,
    lost: false,
    fleetSize: 2,
    present: 2,
    /** The smallest and largest RATE_LIMIT_FLEET_SIZE on record, as the scripts tell them (kept on the member). */
    sizes: undefined as { lo: number, hi: number } | undefined,
    lastError: undefined as unknown,
    answer: (_scope: string, _id: string): Partial<TakeReply> => ({ code: 'ok' })
  }
  let listener: ((up: boolean, err?: unknown) => void) | undefined
  const fail = (): never => { throw new Error('Command timed out') }
  const noteSizes = (m: Member): void => { if (state.sizes !== undefined) m.sizes = state.sizes }
  const redis = {
    displayUrl: 'redis://127.0.0.1:6379',
    // Every command answers as it is asked: none waits.
    unansweredFor: () => 0,
    async readClock () { calls.push('time'); if (!state.up) fail() },
    async take (m: Member, scope: string, _l: unknown, id: string): Promise<TakeReply> {
      calls.push(`take ${scope}`)
      if (!state.up) fail()
      noteSizes(m)
      return { code: 'ok', ms: 0, fleetSize: state.fleetSize, present: state.present, ...state.answer(scope, id) }
    },
    async reassert (m: Member, limits: ReassertLimit[]) {
      calls.push('reassert')
      if (!state.up) fail()
      noteSizes(m)
      reasserted.push(limits)
      return { late: false, lost: state.lost, fleetSize: state.fleetSize, present: state.present, epoch: 'e:1', epochAgeMs: 60_000 }
    },
    async heartbeat (m: Member) {
      calls.push('heartbeat')
      if (!state.up) fail()
      noteSizes(m)
      return { code: 'ok' as const, fleetSize: state.fleetSize, present: state.present, cooldowns: new Map<string, number>() }
    },
    async refund (_s: string, _l: unknown, id: string) { refunded.push(id); if (!state.up) fail() },
    async leave () { calls.push('leave'); if (!state.up) fail() },
    async leaving (_s: string, _l: unknown, id: string) { calls.push(`leaving ${id}`); if (!state.up) fail() },
    async coolDown (_s: string, request: { retryAfterMs: number | undefined }) { calls.push('cooldown'); if (!state.up) fail(); return request.retryAfterMs ?? 1000 },
    onState (fn: (up: boolean, err?: unknown) => void) { listener = fn },
    async connect () { return state.up },
    async ping () { calls.push('ping'); return state.up },
    lastError: () => state.lastError,
    describe: (err: unknown) => (err as Error).message,
    async close () {}
  }
  return { redis: redis as unknown as RedisStore, state, calls, reasserted, refunded, emit: (up: boolean, err?: unknown) => { listener?.(up, err) } }
}

async function setup (t: Test, rules: string, { fleetFloor = 0, up = true, fleetSize = 2 } = {}) {
  const c = fakeClock()
  const double = fakeRedis()
  double.state.up = up
  double.state.fleetSize = fleetSize
  double.state.present = fleetSize
  const logs: Array<Record<string, unknown>> = []
  const log = pino({ level: 'debug' }, { write: (line: string) => { logs.push(JSON.parse(line) as Record<string, unknown>) } })
  const cooled: string[] = []
  const store = createFleetStore({
    redis: double.redis,
    clock: c.clock,
    log,
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: rulesOf(rules),
    redisTimeoutMs: TIMEOUT_MS,
    fleetFloor,
    timing: TIMING,
    onCooldown: (scope) => { cooled.push(scope) }
  })
  await store.start()
  t.teardown(() => store.close())
  const rule = rulesOf(rules)[0] as Rule
  const take = async (): Promise<Take> => await takeAndSend(store, rule.id, rule.limits)
  return { c, store, double, logs, cooled, rule, take }
}

t.test('cut off with no fleet size known: budgeted requests are refused, unbudgeted ones go', async (t) => {
  const { store, take } = await setup(t, 'GET /a 4/1s', { up: false })
  t.equal(store.status().state, 'connecting')
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'never saw Redis, no RATE_LIMIT_FLEET_SIZE: share unknown')
  t.match(await store.take('upstream', []), { kind: 'ok', id: '' })
})

t.test('cut off from the start with RATE_LIMIT_FLEET_SIZE: nothing alone until Redis has counted it present (no one would hold back what it spent); then its share, one window after that', async (t) => {
  const { c, double, take } = await setup(t, 'GET /a 4/1s', { fleetFloor: 2, up: false })
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs })
  await c.tick(60_000)
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'a minute later: still nothing')
  double.state.up = true
  await c.tick(TIMING.heartbeatMs)
  await c.tick(0)
  t.match(await take(), { kind: 'ok' }, 'counted present, shared')
  double.state.up = false
  t.match(await take(), { kind: 'degraded' }, 'cut off again: a failed take')
  await c.tick(TIMEOUT_MS + TIMING.presenceTtlMs + 1000)
  t.match(await take(), { kind: 'ok' }, 'its share, one window after Redis could last count it present')
  t.match(await take(), { kind: 'ok' })
  t.match(await take(), { kind: 'degraded' }, 'floor(4 / 2) = 2 per window, no more')
})

t.test('cut off without RATE_LIMIT_FLEET_SIZE: nothing, even after the fleet was seen (a learned size may lag a sidecar joining)', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 4/1s')
  t.equal(store.status().size, 2, 'learned from Redis')
  double.state.up = false
  await c.tick(10_000)
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs })
  t.equal(store.share({ count: 4, windowMs: 1000, text: '4/1s' }), 0)
})

t.test('the fleet size is RATE_LIMIT_FLEET_SIZE, or more while more are present: Redis that lost its data and says 1 does not make a sidecar a fleet of one', async (t) => {
  const { c, store, double } = await setup(t, 'GET /a 4/1s', { fleetFloor: 2, fleetSize: 3 })
  t.equal(store.status().size, 3, 'three present (a restart overlapping its earlier run): shares of three')
  t.equal(store.share({ count: 6, windowMs: 1000, text: '6/1s' }), 2)
  double.state.fleetSize = 1
  double.state.present = 1
  await c.tick(TIMING.heartbeatMs)
  await c.tick(0)
  t.equal(store.status().size, 2, 'the declared size stands')
  t.equal(store.share({ count: 6, windowMs: 1000, text: '6/1s' }), 3)
})

t.test('degraded after a failure: nothing for one window after the last moment Redis could count it present, then its share; its earlier sends count', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 6/1s', { fleetFloor: 2 })
  t.equal(store.status().state, 'shared')
  t.match(await take(), { kind: 'ok' }, 'shared: one send through Redis')
  const sentAt = c.clock.now()
  double.state.up = false
  const first = await take()
  t.equal(store.status().state, 'degraded')
  // The failed take was itself sent (and may run late in Redis, until its deadline): presence
  // may last until then + timeout + TTL; one window (1 s) later the share may be spent. The
  // refusal says to ask again after a heartbeat: Redis may answer by then.
  t.match(first, { kind: 'degraded', ms: TIMING.heartbeatMs })
  await c.tick(TIMEOUT_MS + TIMING.presenceTtlMs + 1000 - 1)
  t.match(await take(), { kind: 'degraded', ms: 1 })
  await c.tick(1)
  t.ok(c.clock.now() - sentAt >= 1000, 'the shared send has left its window by now')
  for (let i = 0; i < 3; i++) t.match(await take(), { kind: 'ok' }, `share ${i + 1} of floor(6 / 2)`)
  t.match(await take(), { kind: 'degraded' }, 'the share is spent')
  t.equal(double.calls.filter((call) => call.startsWith('take')).length, 2, 'no take is sent to Redis while degraded')
})

t.test('cut off in a rollout raising the size, the share is of the largest size declared, whatever this one declares or sees present', async (t) => {
  // Three declare 3, a fourth (surge) declares 4: four may run at once. This one saw three present
  // (the fourth already cut off): each of the four may spend its share alone, so 12 / 4 each.
  for (const [name, sizes, share] of [
    ['the largest on record is 4', { lo: 3, hi: 4 }, 3],
    ['control: every sidecar declares 3', { lo: 3, hi: 3 }, 4]
  ] as const) {
    await t.test(name, async (t) => {
      const { c, store, double, take } = await setup(t, 'GET /a 12/1s', { fleetFloor: 3, fleetSize: 3 })
      double.state.sizes = sizes
      t.match(await take(), { kind: 'ok' }, 'a send through Redis: the sizes on record told')
      double.state.up = false
      await take()
      await c.tick(TIMEOUT_MS + TIMING.presenceTtlMs + 1000)
      let alone = 0
      while ((await take()).kind === 'ok') alone++
      t.equal(alone, share, `alone, ${share} of 12 (the ledger's own send has left the window)`)
      t.equal(store.share({ count: 12, windowMs: 1000, text: '12/1s' }), share, '/status says the same share')
      t.equal(store.status().size, sizes.hi, '/status gives the size the share divides by')
    })
  }

  for (const [hi, spent] of [[2, 2], [1, 4]] as const) {
    const one = await setup(t, 'GET /a 4/1s', { fleetFloor: 1, fleetSize: 1 })
    one.double.state.sizes = { lo: 1, hi }
    t.match(await one.take(), { kind: 'ok' })
    one.double.state.up = false
    await one.take()
    await one.c.tick(TIMEOUT_MS + TIMING.presenceTtlMs + 1000)
    let alone = 0
    while ((await one.take()).kind === 'ok') alone++
    t.equal(alone, spent, hi === 2 ? 'declared one while another declares two: not a fleet of one, half of 4' : 'control: a fleet of one spends the whole budget')
  }
})

t.test('a share of 0 (the catalog across two sidecars) is refused while degraded; a fleet of one keeps its whole budget at once', async (t) => {
  const two = await setup(t, 'GET /catalog 1/4h')
  two.double.state.up = false
  t.match(await two.take(), { kind: 'degraded', ms: TIMING.heartbeatMs })
  await two.c.tick(10 * TIMING.heartbeatMs)
  t.match(await two.take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'not a matter of time: refused until Redis answers')

  const one = await setup(t, 'GET /catalog 1/1m', { fleetFloor: 1, fleetSize: 1 })
  t.equal(one.store.share(one.rule.limits[0]!), 1)
  await one.c.tick(60_000)
  one.double.state.up = false
  t.match(await one.take(), { kind: 'ok' }, 'a declared fleet of one, a window after start: its ledger is the whole tally')
  t.match(await one.take(), { kind: 'degraded', ms: 60_000 }, 'its own send holds the window, Redis or not')
  await one.c.tick(60_000)
  t.match(await one.take(), { kind: 'ok' })
})

t.test('a declared fleet of one restarted while Redis is away spends nothing until Redis counts it present (its earlier run may have spent)', async (t) => {
  const { c, double, take } = await setup(t, 'GET /catalog 1/1m', { fleetFloor: 1, fleetSize: 1, up: false })
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs })
  await c.tick(120_000)
  t.match(await take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'two windows later: still nothing')
  double.state.up = true
  await c.tick(TIMING.heartbeatMs)
  await c.tick(0)
  t.match(await take(), { kind: 'ok' })
})

t.test('a late answer (the script waited past its deadline and did nothing) is a failure', async (t) => {
  const { store, double, take } = await setup(t, 'GET /a 4/1s')
  double.state.answer = () => ({ code: 'late' })
  t.match(await take(), { kind: 'degraded' })
  t.equal(store.status().state, 'degraded')
})

t.test('Redis answers again: the ledger is told again with the same ids, then shared', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 10/10s', { fleetFloor: 2 })
  const ids: string[] = []
  double.state.answer = (_scope, id) => { ids.push(id); return { code: 'ok' } }
  await take()
  double.state.up = false
  t.match(await take(), { kind: 'degraded' })
  double.state.up = true
  await c.tick(TIMING.heartbeatMs)
  await c.tick(0)
  t.equal(store.status().state, 'shared')
  t.same(double.reasserted.at(-1)?.[0]?.sends.map((s) => s.id), [ids[0]], 'the send made through Redis, with its own id')

  double.state.up = false
  await take()
  await c.tick(TIMEOUT_MS + TIMING.presenceTtlMs + 10_000)
  const alone = await take()
  t.equal(alone.kind, 'ok', 'its share, a window after the loss')
  double.state.up = true
  await c.tick(TIMING.heartbeatMs)
  await c.tick(0)
  t.equal(store.status().state, 'shared')
  t.same(double.reasserted.at(-1)?.[0]?.sends.map((s) => s.id), [alone.kind === 'ok' ? alone.id : 'none'], 'the send made alone is told to Redis')
})

t.test('the epoch changed under a take: decide alone, and tell Redis the ledger again', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 4/1s')
  const before = double.reasserted.length
  double.state.answer = () => ({ code: 'epoch' })
  t.match(await take(), { kind: 'degraded', lost: true }, 'refused as lost data, not as Redis silent')
  await c.tick(0)
  t.equal(double.reasserted.length, before + 1)
  t.equal(store.status().state, 'shared')
})

t.test('refunds: Redis is told while shared; the ledger always', async (t) => {
  const { c, store, double, rule, take } = await setup(t, 'GET /a 1/1m', { fleetFloor: 1, fleetSize: 1 })
  await c.tick(60_000)
  const sent = await take()
  t.equal(sent.kind, 'ok')
  if (sent.kind === 'ok') store.refund(rule.id, rule.limits, sent.id)
  t.same(double.refunded, [sent.kind === 'ok' ? sent.id : ''])
  double.state.up = false
  const alone = await take()
  t.equal(alone.kind, 'ok', 'fleet of one: the refunded point is free again in the ledger')
  if (alone.kind === 'ok') store.refund(rule.id, rule.limits, alone.id)
  t.equal(double.refunded.length, 1, 'not sent to a Redis that does not answer')
  t.match(await take(), { kind: 'ok' })
})

t.test('a send that leaves late: its own wait holds a take before Redis is asked; Redis re-times it, not one that left at once', async (t) => {
  const { c, store, double, rule, take } = await setup(t, 'GET /a 1/1s', { fleetFloor: 1, fleetSize: 1 })
  const waiting = await store.take(rule.id, rule.limits)
  if (waiting.kind !== 'ok') throw new Error(`not taken: ${waiting.kind}`)
  await c.tick(1_500)
  const takes = double.calls.filter((call) => call.startsWith('take')).length
  t.match(await store.take(rule.id, rule.limits), { kind: 'budget', ms: 1_000 }, 'admitted 1.5 s ago and still waiting: it leaves now at the soonest')
  t.equal(double.calls.filter((call) => call.startsWith('take')).length, takes, 'decided by its own ledger: Redis may have dropped that send')
  store.leaving(rule.id, rule.limits, waiting.id)
  t.ok(double.calls.includes(`leaving ${waiting.id}`), 'Redis is told it left now')
  await c.tick(1_000)
  const prompt = await take()
  t.equal(prompt.kind, 'ok')
  t.notOk(double.calls.some((call) => prompt.kind === 'ok' && call === `leaving ${prompt.id}`), 'left at once: no round trip')
})

t.test('a cool-down met in Redis is kept here and honoured while cut off', async (t) => {
  const { c, store, double, cooled, take } = await setup(t, 'GET /a 100/1s', { fleetFloor: 1, fleetSize: 1 })
  double.state.answer = () => ({ code: 'cooldown', ms: 30_000 })
  t.match(await take(), { kind: 'cooldown', ms: 30_000 })
  t.same(cooled, ['GET /a'])
  double.state.up = false
  await c.tick(10_000)
  t.match(await take(), { kind: 'cooldown', ms: 20_000 }, 'Redis gone: TI\'s Retry-After still holds')
  t.equal(store.cooldowns.left('GET /a'), 20_000)
})

t.test('a refused password is named, logged once per change, and shown', async (t) => {
  const { store, double, logs, take } = await setup(t, 'GET /a 4/1s')
  double.state.up = false
  const wrongpass = new Error('WRONGPASS invalid username-password pair or user is disabled.')
  double.state.lastError = wrongpass
  await take()
  double.emit(false, wrongpass)
  t.match(store.status().problem, /^redis refused our credentials \(WRONGPASS\)/)
  t.equal(logs.filter((l) => /refused our credentials|unreachable/.test(String(l.msg)) || /WRONGPASS/.test(String(l.reason))).length, 1, 'once')
})

t.test('a late or failed heartbeat changes nothing by itself: takes still go to Redis while it answers them', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 4/1s')
  const heartbeat = double.redis.heartbeat
  double.redis.heartbeat = async () => { throw new Error('Command timed out') }
  await c.tick(3 * TIMING.heartbeatMs)
  t.equal(store.status().state, 'shared')
  t.match(await take(), { kind: 'ok' })
  double.redis.heartbeat = heartbeat
})

t.test('cut off, a request decided alone asks Redis at once: answering again, it is shared before the next heartbeat', async (t) => {
  const { c, store, double, take } = await setup(t, 'GET /a 4/1s')
  double.state.up = false
  await take()
  t.equal(store.status().state, 'degraded')
  double.state.up = true
  const pings = double.calls.filter((call) => call === 'ping').length
  t.match(await take(), { kind: 'degraded' }, 'this one is decided alone')
  await c.tick(0)
  t.equal(double.calls.filter((call) => call === 'ping').length, pings + 1, 'one PING, at once')
  t.equal(store.status().state, 'shared')
  t.match(await take(), { kind: 'ok' }, 'the next goes through Redis')
})

t.test('reconnections back off from 50 ms, doubling, to 1 s: a healed partition is shared again within a second', async (t) => {
  t.same([0, 1, 2, 3, 4, 5, 10, 1000].map(reconnectDelayMs), [50, 100, 200, 400, 800, 1000, 1000, 1000])
  t.equal(RECONNECT_MAX_MS, 1000)
})

t.test('a request of no rule, admitted through Redis, goes however late it leaves cut off', async (t) => {
  const { c, store, double } = await setup(t, 'GET /a 1/1s')
  const taken = await store.take('upstream', [])
  if (taken.kind !== 'ok' || taken.id === '') throw new Error('an id from Redis')
  const ruled = await store.take('GET /a', rulesOf('GET /a 1/1s')[0]?.limits ?? [])
  if (ruled.kind !== 'ok') throw new Error('admitted')
  double.state.up = false
  await store.take('upstream', [])
  await c.tick(100)
  t.equal(store.status().state, 'degraded', 'a take that failed: cut off')
  t.equal(store.leaving('upstream', [], taken.id), undefined, 'nothing Redis could count early')
  t.match(store.leaving('GET /a', rulesOf('GET /a 1/1s')[0]?.limits ?? [], ruled.id), { reason: 'degraded' }, 'control: one of a rule is refused')
})

t.test('a heartbeat that times out is sent again at once, once: then at its pace', async (t) => {
  const { c, store, double } = await setup(t, 'GET /a 4/1s')
  const beats = (): number => double.calls.filter((call) => call === 'heartbeat').length
  await c.tick(TIMING.heartbeatMs)
  t.equal(beats(), 1)
  double.state.up = false
  await c.tick(TIMING.heartbeatMs)
  await c.tick(5)
  t.equal(beats(), 3, 'timed out: again at once, and only once')
  await c.tick(TIMING.heartbeatMs - 10)
  t.equal(beats(), 3)
  await c.tick(10)
  t.equal(beats(), 4, 'then a heartbeat later')
  t.equal(store.status().state, 'shared', 'a late heartbeat changes nothing by itself')
})
