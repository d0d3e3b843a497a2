// The quota guard's own contract, in process: admission and waiting, the cool-down policy and
// its gauge, what a refusal says, and what it reports (status, /readyz note) over the store it
// is given. A real local store and cool-downs on a fake clock; where the guard's answer depends
// on the fleet's state, a stand-in fleet store whose state the test sets (the fleet store's own
// guarantees are test/quota/fleet-store.test.ts's and test/quota/model/'s).
import { EventEmitter } from 'node:events'
import t from 'tap'
import { createQuotaGuard, UPSTREAM_SCOPE, type Caller, type QuotaGuard, type Verdict } from '../../src/quota/guard.js'
import type { FleetStatus, FleetStore } from '../../src/quota/fleet-store.js'
import type { Limit, Rule } from '../../src/config/rate-limit-rules.js'
import type { RateLimitConfig } from '../../src/config/rate-limits.js'
import { createCooldowns, createLocalStore, type Take } from '../../src/quota/store.js'
import { PENDING_HOLD_MS } from '../../src/quota/ledger.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import { guardConfig as config, guardOnFakeClock, WALL_START } from './guard-config.js'

/** A caller as the guard sees a ServerResponse: `destroyed` is set before 'close' is emitted (node's onServerResponseClose). */
function caller () {
  const emitter = new EventEmitter()
  const c = {
    destroyed: false,
    once: (event: 'close', listener: () => void) => emitter.once(event, listener),
    removeListener: (event: 'close', listener: () => void) => emitter.removeListener(event, listener),
    leave () {
      c.destroyed = true
      emitter.emit('close')
    },
    listeners: () => emitter.listenerCount('close')
  }
  return c satisfies Caller
}

/** A stand-in fleet store: the local store on the fleet's own cool-downs, in the state the test sets. */
function standInFleet (clock: ReturnType<typeof fakeClock>['clock']) {
  const cooldowns = createCooldowns(clock)
  const local = createLocalStore(clock, cooldowns)
  const control = {
    status: { state: 'shared', size: 3, present: 2, declared: 3, problem: undefined } as FleetStatus,
    /** The next takes' answers, before the local store's. */
    answers: [] as Array<Take | Promise<Take>>,
    takes: 0,
    onCooldown: (_scope: string): void => {}
  }
  const create = (onCooldown: (scope: string) => void): FleetStore => {
    control.onCooldown = onCooldown
    return {
      take: (scope: string, limits: readonly Limit[]) => {
        control.takes++
        return control.answers.shift() ?? local.take(scope, limits)
      },
      refund: local.refund,
      leaving: local.leaving,
      coolDown: local.coolDown,
      cooldowns,
      displayUrl: 'redis://redis.test:6379',
      status: () => ({ ...control.status }),
      share: (limit: Limit) => Math.floor(limit.count / control.status.size),
      budget: async () => [],
      start: async () => {},
      close: async () => {}
    }
  }
  return { control, cooldowns, create }
}

/** A guard on a fake clock, its logs and metrics; over a stand-in fleet store with `{ fleet: true }`. */
function setup (rules: string, options: Partial<RateLimitConfig> = {}, { fleet: withFleet = false } = {}) {
  const c = fakeClock(WALL_START)
  const fleet = standInFleet(c.clock)
  const logs = captureLogs()
  const { metrics, guard: created, gauge } = guardOnFakeClock(config(rules, options), { c, log: logs.log, fleet: withFleet ? fleet.create : undefined })
  // Each admitted request leaves at once (the wait to leave is test/quota/late-sends.test.ts's).
  const sent = (verdict: Verdict): Verdict => {
    if (verdict.ok) created.leaving(verdict.ticket)
    return verdict
  }
  const guard: QuotaGuard = {
    ...created,
    admit: (...args: Parameters<QuotaGuard['admit']>) => {
      const verdict = created.admit(...args)
      return verdict instanceof Promise ? verdict.then(sent) : sent(verdict)
    }
  }
  const rule = (method: string, target: string): Rule | undefined => guard.ruleFor(method, target)
  const refusals = async (reason: string, action = 'refused'): Promise<number> =>
    (await metrics.rateLimited.get()).values.filter((v) => v.labels.reason === reason && v.labels.action === action).reduce((sum, v) => sum + v.value, 0)
  return { c, logs, metrics, guard, rule, gauge, refusals, fleet }
}

/** Settles a verdict, resolving it only as far as already-due work goes (no clock moves). */
async function settled (verdict: Verdict | Promise<Verdict>): Promise<Verdict | 'pending'> {
  return await Promise.race([verdict, new Promise<'pending'>((resolve) => { setImmediate(() => { resolve('pending') }) })])
}

const RATE_LIMITED = { statusCode: 429, headers: {} }

t.test('whether anything can stop a request: rules, or cool-downs on', async (t) => {
  t.equal(setup('', { cooldownMs: 0 }).guard.active, false, 'no rules and no cool-downs: nothing to guard')
  t.equal(setup('', { cooldownMs: 1_000 }).guard.active, true, 'cool-downs on: a 429 can stop the upstream')
  t.equal(setup('GET /a 1/1s', { cooldownMs: 0 }).guard.active, true, 'rules with cool-downs off')
  const { guard } = setup('', { cooldownMs: 0 })
  t.strictSame(guard.admit(undefined, caller()), { ok: true, delayed: false, ticket: undefined }, 'an inactive guard admits at once')
})

t.test('with RATE_LIMIT_COOLDOWN_MS=0 the rules are still enforced, and a 429 starts no cool-down', async (t) => {
  const { guard, rule, gauge, logs } = setup('GET /a 2/1s', { cooldownMs: 0, maxWaitMs: 0 })
  const a = rule('GET', '/a')
  t.equal(a?.id, 'GET /a')
  for (let i = 0; i < 2; i++) t.equal((await guard.admit(a, caller())).ok, true, `send ${i + 1} of 2`)
  const third = await guard.admit(a, caller())
  t.match(third, { ok: false, reason: 'budget', scope: 'GET /a' }, 'the third within the second is refused')

  guard.answered(undefined, RATE_LIMITED)
  guard.answered(a, RATE_LIMITED)
  t.strictSame(await guard.admit(undefined, caller()), { ok: true, delayed: false, ticket: undefined }, 'the upstream does not cool down after a 429')
  t.equal(await gauge(UPSTREAM_SCOPE), 0)
  t.equal(await gauge('GET /a'), 0)
  t.strictSame(guard.status().cooldowns, [])
  t.equal(logs.entries().filter((e) => e.msg === 'gateway rate-limit answer: cooling down').length, 0, 'nothing logged as a cool-down')
  t.equal(guard.holds(500), false, 'a 500 is passed on as it comes: no fault is looked for with cool-downs off')
})

t.test('with cool-downs on, only a 500 is held back to look for the rate-limit fault', async (t) => {
  const { guard } = setup('', { cooldownMs: 1_000 })
  t.equal(guard.holds(500), true)
  t.equal(guard.holds(502), false)
})

t.test('an admission verdict: a ticket for what was taken, not delayed unless it waited', async (t) => {
  const { guard, rule, c } = setup('GET /a 1/1s', { maxWaitMs: 2_000 })
  const a = rule('GET', '/a')
  const first = guard.admit(a, caller())
  t.notOk(first instanceof Promise, 'room in the budget: decided synchronously')
  t.match(first, { ok: true, delayed: false, ticket: { scope: 'GET /a', limits: a?.limits } })
  t.equal((first as { delayed: boolean }).delayed, false)

  const second = guard.admit(a, caller())
  t.equal(await settled(second), 'pending', 'over budget, it waits for the window')
  await c.tick(1_000)
  const waited = await second
  t.match(waited, { ok: true, delayed: true, ticket: { scope: 'GET /a' } }, 'admitted after the wait: delayed')

  t.strictSame(guard.admit(rule('GET', '/other'), caller()), { ok: true, delayed: false, ticket: undefined }, 'a request of no rule takes nothing')
})

t.test('a budget refusal: its reason, scope and wait, nothing else', async (t) => {
  const { guard, rule, refusals } = setup('GET /a 1/10s', { maxWaitMs: 2_000 })
  const a = rule('GET', '/a')
  t.equal((await guard.admit(a, caller())).ok, true)
  t.strictSame(await guard.admit(a, caller()), { ok: false, reason: 'budget', retryAfterMs: 10_000, scope: 'GET /a' }, 'frees later than the longest wait: refused at once')
  t.equal(await refusals('budget'), 1)
})

t.test('the wait for a budget counts every wait of the request against RATE_LIMIT_MAX_WAIT_MS', async (t) => {
  const { guard, rule, c } = setup('GET /a 1/600ms', { maxWaitMs: 1_000 })
  const a = rule('GET', '/a')
  t.equal((await guard.admit(a, caller())).ok, true, 'the point is spent at 0 ms')
  // Another request arrives as the point frees, just ahead of the waiter, and takes it.
  let other: Verdict | Promise<Verdict> | undefined
  c.fake.setTimeout(() => { other = guard.admit(a, caller()) }, 600)
  const waiting = guard.admit(a, caller())
  t.equal(await settled(waiting), 'pending', 'frees in 600 ms, within 1000 ms: it waits')
  await c.tick(600)
  t.match(await other, { ok: true, delayed: false }, 'the other request took the freed point')
  t.strictSame(await settled(waiting), { ok: false, reason: 'budget', retryAfterMs: 600, scope: 'GET /a' },
    'told to wait 600 ms more after waiting 600 ms: over 1000 ms in all, refused without a second wait')
})

t.test('a caller already gone when its wait would start is not kept waiting, and spends nothing', async (t) => {
  const { guard, rule } = setup('GET /a 1/1s', { maxWaitMs: 2_000 })
  const a = rule('GET', '/a')
  t.equal((await guard.admit(a, caller())).ok, true)
  const gone = caller()
  gone.leave()
  t.strictSame(await settled(guard.admit(a, gone)), { ok: false, reason: 'gone' }, 'answered at once, no clock moved')
})

t.test('a caller that leaves while it waits: answered at once, no timer or listener left, nothing spent', async (t) => {
  const { guard, rule, c } = setup('GET /a 1/1s', { maxWaitMs: 2_000, cooldownMs: 0 })
  const a = rule('GET', '/a')
  t.equal((await guard.admit(a, caller())).ok, true)
  const leaving = caller()
  const waiting = guard.admit(a, leaving)
  t.equal(await settled(waiting), 'pending')
  t.equal(leaving.listeners(), 1, 'it listens for the caller leaving')
  leaving.leave()
  t.strictSame(await settled(waiting), { ok: false, reason: 'gone' })
  t.equal(c.fake.countTimers(), 0, 'its wait timer is cancelled')
  await c.tick(1_000)
  t.match(guard.admit(a, caller()), { ok: true, delayed: false }, 'the point it waited for is free for the next')

  const waits = caller()
  const admitted = guard.admit(a, waits)
  await c.tick(1_000)
  t.match(await admitted, { ok: true, delayed: true })
  t.equal(waits.listeners(), 0, 'a wait that ends stops listening for the caller')
})

t.test('a caller that is gone by the end of its wait, before its close event, sends nothing', async (t) => {
  const { guard, rule, c } = setup('GET /a 1/1s', { maxWaitMs: 2_000 })
  const a = rule('GET', '/a')
  t.equal((await guard.admit(a, caller())).ok, true)
  const leaving = caller()
  const waiting = guard.admit(a, leaving)
  // The socket closed: the response is destroyed; its 'close' comes on a later tick.
  leaving.destroyed = true
  await c.tick(1_000)
  t.strictSame(await waiting, { ok: false, reason: 'gone' })
  t.match(guard.admit(a, caller()), { ok: true }, 'the freed point was not taken for it')
})

t.test('a gateway 429 cools the scope down: refusals, the gauge until its end, the log fields operators read', async (t) => {
  const { guard, rule, c, gauge, logs, refusals } = setup('GET /a 5/1s', { cooldownMs: 1_000, cooldownMaxMs: 60_000 })
  const a = rule('GET', '/a')
  t.equal(await gauge('GET /a'), 0, 'each rule\'s gauge exists from the start, at 0')
  t.equal(await gauge(UPSTREAM_SCOPE), 0, 'and the upstream\'s')

  guard.answered(a, { statusCode: 429, headers: { 'retry-after': '3' } })
  const refused = await guard.admit(a, caller())
  t.strictSame(refused, { ok: false, reason: 'cooldown', retryAfterMs: 3_000, scope: 'GET /a' })
  t.equal(await refusals('cooldown'), 1)
  t.equal(await gauge('GET /a'), (WALL_START + 3_000) / 1000, 'the gauge shows the end, in unix seconds')
  t.match(logs.entries().find((e) => e.msg === 'gateway rate-limit answer: cooling down'), { level: 40, rule: 'GET /a', cooldownMs: 3_000, retryAfter: true })

  await c.tick(1_000)
  guard.answered(a, { statusCode: 429, headers: { 'retry-after': '10' } })
  t.equal(await gauge('GET /a'), (WALL_START + 11_000) / 1000, 'a longer Retry-After moves the gauge to the new end')
  await c.tick(9_999)
  t.equal(await gauge('GET /a'), (WALL_START + 11_000) / 1000, 'the earlier end passed: still cooling down')
  await c.tick(1)
  t.equal(await gauge('GET /a'), 0, 'reset when the cool-down ends')

  guard.answered(undefined, { statusCode: 429, headers: {} })
  const backoff = logs.entries().filter((e) => e.msg === 'gateway rate-limit answer: cooling down').at(-1)
  t.match(backoff, { rule: UPSTREAM_SCOPE, cooldownMs: 1_000, retryAfter: false }, 'no Retry-After: the backoff, and the log says so')
  t.equal(await gauge(UPSTREAM_SCOPE), (WALL_START + 12_000) / 1000)
  guard.answered(undefined, { statusCode: 503, headers: { 'retry-after': '5' } })
  t.equal(await gauge(UPSTREAM_SCOPE), (WALL_START + 12_000) / 1000, 'only a 429 cools down')
})

t.test('closing the guard leaves no timer behind', async (t) => {
  const { guard, rule, c } = setup('GET /a 5/1s')
  guard.answered(rule('GET', '/a'), { statusCode: 429, headers: { 'retry-after': '30' } })
  t.equal(c.fake.countTimers(), 1, 'the gauge\'s reset is pending')
  await guard.close()
  t.equal(c.fake.countTimers(), 0)
})

t.test('what a local 429 tells the caller, by reason', async (t) => {
  const { guard } = setup('GET /a 1/1s')
  const says = (verdict: Parameters<typeof guard.describe>[0]): string => guard.describe(verdict).message
  t.match(says({ ok: false, reason: 'cooldown', retryAfterMs: 1_500, scope: UPSTREAM_SCOPE }), /^the upstream is in a cool-down .*retry after 2 s$/)
  t.match(says({ ok: false, reason: 'budget', retryAfterMs: 1_000, scope: 'GET /a' }), /^the budget of rule GET \/a is spent; retry after 1 s$/)
  t.match(says({ ok: false, reason: 'degraded', retryAfterMs: 1_000, scope: 'GET /a' }), /^the fleet's budget of rule GET \/a cannot be checked .*this sidecar's share is spent/)
  t.match(says({ ok: false, reason: 'degraded', retryAfterMs: 1_000, scope: 'GET /a', lost: true }), /^the fleet's tally of rule GET \/a cannot be trusted yet/)
  t.match(says({ ok: false, reason: 'degraded', retryAfterMs: 1_000, scope: 'GET /a', aloneEnded: true }), /^the fleet's budget of rule GET \/a cannot be checked: this sidecar has been cut off .* longer than RATE_LIMIT_ALONE_MAX_MS .*retry after 1 s$/)
  t.match(says({ ok: false, reason: 'budget', retryAfterMs: 1_000, scope: 'GET /a', lost: true }), /^the budget of rule GET \/a is spent/, 'lost speaks only of the fleet\'s tally')
  t.equal(guard.describe({ ok: false, reason: 'budget', retryAfterMs: 2_001, scope: 'GET /a' }).retryAfterSeconds, 3)
})

t.test('without Redis: the memory backend, never degraded, no readiness note', async (t) => {
  const { guard } = setup('GET /a 4/1s')
  t.equal(guard.backend(), 'memory')
  t.equal(guard.readinessNote(), undefined)
  t.match(guard.status(), { backend: 'memory', degraded: false, redis: null, fleet: null, rules: [{ rule: 'GET /a', limits: ['4/1s'], share: [4] }] })
})

t.test('over the fleet\'s store: backend, degraded and the readiness note follow its state', async (t) => {
  const { guard, fleet } = setup('GET /a 4/1s', {}, { fleet: true })
  const set = (status: Partial<FleetStatus>): void => { fleet.control.status = { ...fleet.control.status, ...status } }

  t.equal(guard.backend(), 'redis')
  t.equal(guard.readinessNote(), undefined, 'shared: nothing to note')
  t.match(guard.status(), { backend: 'redis', degraded: false, redis: { url: 'redis://redis.test:6379', up: true, problem: null }, fleet: { size: 3, present: 2 } })

  set({ state: 'settling' })
  t.equal(guard.backend(), 'memory')
  t.match(guard.readinessNote(), /^rate limits shared in redis redis:\/\/redis.test:6379 in a moment/)
  t.match(guard.status(), { backend: 'memory', degraded: false })

  set({ state: 'connecting' })
  t.equal(guard.readinessNote(), 'rate limits not shared: redis redis://redis.test:6379 not reachable yet; each sidecar spends only its share (fleet size 3)')
  set({ state: 'degraded' })
  t.equal(guard.readinessNote(), 'rate limits not shared: redis redis://redis.test:6379 unreachable or too slow; each sidecar spends only its share (fleet size 3)')
  t.match(guard.status(), { backend: 'memory', degraded: true, redis: { up: false } })
  set({ problem: 'WRONGPASS', declared: 0 })
  t.equal(guard.readinessNote(), 'rate limits not shared: redis redis://redis.test:6379 WRONGPASS; budgeted requests are refused until it answers (RATE_LIMIT_FLEET_SIZE is not set)')
  t.match(guard.status(), { redis: { problem: 'WRONGPASS' } })
  set({ problem: undefined, declared: 3, aloneEnded: true })
  t.equal(guard.readinessNote(), 'rate limits not shared: redis redis://redis.test:6379 unreachable or too slow; cut off for longer than RATE_LIMIT_ALONE_MAX_MS, budgeted requests are refused until it answers')
})

t.test('over the fleet\'s store: its refusals and admissions reach the caller as they are', async (t) => {
  const { guard, rule, fleet } = setup('GET /a 4/1s', { maxWaitMs: 500 }, { fleet: true })
  const a = rule('GET', '/a')
  fleet.control.answers.push({ kind: 'degraded', ms: 2_000, lost: true })
  t.strictSame(await guard.admit(a, caller()), { ok: false, reason: 'degraded', retryAfterMs: 2_000, scope: 'GET /a', lost: true }, 'a tally not trusted yet')
  fleet.control.answers.push({ kind: 'degraded', ms: 2_000 })
  t.strictSame(await guard.admit(a, caller()), { ok: false, reason: 'degraded', retryAfterMs: 2_000, scope: 'GET /a' }, 'a share spent')
  fleet.control.answers.push(Promise.resolve({ kind: 'ok', id: 'm:1' }))
  t.strictSame(await guard.admit(a, caller()), { ok: true, delayed: false, ticket: { scope: 'GET /a', limits: a?.limits, id: 'm:1' } }, 'taken in Redis at once: not delayed')
})

t.test('every cool-down the guard knows of is on its gauge: announced by the fleet, or met at admission', async (t) => {
  const { guard, c, fleet, gauge } = setup('GET /a 4/1s', {}, { fleet: true })

  fleet.control.onCooldown('GET /a')
  t.equal(await gauge('GET /a'), 0, 'an announcement with no cool-down under way changes nothing')
  fleet.cooldowns.adopt('GET /a', 4_000)
  fleet.control.onCooldown('GET /a')
  t.equal(await gauge('GET /a'), (WALL_START + 4_000) / 1000, 'a cool-down learned from Redis')

  fleet.cooldowns.adopt(UPSTREAM_SCOPE, 7_000)
  t.match(await guard.admit(undefined, caller()), { ok: false, reason: 'cooldown', retryAfterMs: 7_000 })
  t.equal(await gauge(UPSTREAM_SCOPE), (WALL_START + 7_000) / 1000, 'one the store held without a word, met at admission')
  await c.tick(7_000)
  t.equal(await gauge(UPSTREAM_SCOPE), 0)
  t.equal(await gauge('GET /a'), 0)
})

t.test('an inactive guard asks its store nothing: no Redis round trip when nothing can stop a request', async (t) => {
  const { guard, fleet } = setup('', { cooldownMs: 0 }, { fleet: true })
  fleet.control.answers.push({ kind: 'ok', id: 'm:1' })
  t.strictSame(guard.admit(undefined, caller()), { ok: true, delayed: false, ticket: undefined })
  t.equal(fleet.control.takes, 0)
})

t.test('a request without limits that had to wait (the fleet could not decide yet) is admitted delayed, with nothing to refund', async (t) => {
  const { guard, c, fleet } = setup('', {}, { fleet: true })
  fleet.control.answers.push({ kind: 'degraded', ms: 200 })
  const waiting = guard.admit(undefined, caller())
  t.equal(await settled(waiting), 'pending')
  await c.tick(200)
  t.strictSame(await waiting, { ok: true, delayed: true, ticket: undefined })
  t.equal(fleet.control.takes, 2, 'asked again after the wait')
})

t.test('a send held past the ledger\'s hold (a stalled STATE_DIR write, say) is refused as it leaves, and its point goes back', async (t) => {
  const { c, metrics } = setup('GET /a 1/10s')
  const logs = captureLogs()
  const guard = createQuotaGuard({ config: config('GET /a 1/10s'), clock: c.clock, log: logs.log, metrics })
  const a = guard.ruleFor('GET', '/a')
  const on = guard.admit(a, caller()) as Verdict
  if (!on.ok) throw new Error('admitted')
  await c.tick(PENDING_HOLD_MS - 1)
  const quick = guard.admit(a, caller())
  t.match(await settled(quick), { ok: false, reason: 'budget' }, 'while held, it counts as leaving now')
  await c.tick(1)
  const stopped = guard.leaving(on.ticket)
  t.match(stopped, { ok: false, reason: 'budget', retryAfterMs: 1_000, scope: 'GET /a', late: true }, 'held 60 s: it would count from the hold\'s end, not from now')
  t.match(guard.describe(stopped as Extract<Verdict, { retryAfterMs: number }>).message, /waited to be sent until the tally could no longer count it where it was admitted \(it waited over a minute\)/)
  guard.refund(on.ticket)
  const next = guard.admit(a, caller()) as Verdict
  t.match(next, { ok: true }, 'given back: the budget has room')
  if (next.ok) t.equal(guard.leaving(next.ticket), undefined, 'admitted just now: it goes')
})
