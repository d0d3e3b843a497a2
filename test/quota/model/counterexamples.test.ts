// Schedules that broke the quota guarantee, replayed by the model test's runner (run.ts:
// the same fleet and the same checks after every step). The first three are the review's
// measurements with their windows shortened to seconds; the others are counterexamples
// model.test.ts found and shrank, written out as it printed them.
import t, { type Test } from 'tap'
import { runSchedule } from './run.js'
import { MODEL_FLEET, type Command, type FleetConfig } from './schedule.js'

t.setTimeout(120_000)
// Each schedule mostly waits (its windows, then a quiet period before the recovery
// check) on a fleet, a redis-server and ports of its own: five at a time (the file is
// among the last tap starts, so its length is the suite's tail).
t.jobs = 5

/** `todo`: the schedule runs and is checked, its failure reported but not counted (an open finding). */
async function holds (t: Test, config: FleetConfig, schedule: Command[], { todo }: { todo?: string } = {}): Promise<void> {
  const report = await runSchedule(config, schedule, 'cx')
  t.equal(report.violation, undefined,
    report.violation === undefined ? 'the guarantee held' : `${report.violation.check}: ${report.violation.message}`,
    { trace: report.trace.join('\n'), ...(todo === undefined ? {} : { todo }) })
}

const call = (s: number, path: 'catalog' | 'item' | 'orders' = 'item'): Command => ({ op: 'call', s, path })

t.test('Redis frozen 3 s, then restarted empty: three sidecars keep to one budget of 4', async (t) => {
  // The review measured 18 calls at TI for a budget of 4/1m: two with Redis up, each
  // sidecar's 4 while Redis was frozen, 4 more after it came back empty. 1m is 6 s here.
  await holds(t, {
    size: 3,
    rules: [{ rule: 'GET /v2/store/products/**', paths: ['catalog', 'item'], limits: [{ n: 4, windowMs: 6000 }] }]
  }, [
    call(0), call(1),
    { op: 'freeze' },
    call(0), call(1), call(2), call(0), call(1), call(2), call(0), call(1), call(2), call(0), call(1), call(2),
    { op: 'wait', ms: 2500 },
    { op: 'restartEmpty' },
    call(0), call(1), call(2), call(0)
  ])
})

t.test('a spend during a blip is remembered when Redis answers again', async (t) => {
  // One sidecar, the catalog's 1/4h (5 s here): its connection to Redis cut (Redis keeps
  // its data), one catalog call meanwhile, a second the moment Redis answers again.
  await holds(t, {
    size: 1,
    rules: [{ rule: 'GET /v2/store/products/catalog', paths: ['catalog'], limits: [{ n: 1, windowMs: 5000 }] }]
  }, [
    { op: 'cut', s: 0 },
    call(0, 'catalog'),
    { op: 'heal' },
    { op: 'settle' },
    call(0, 'catalog')
  ])
})

t.test('a cool-down learned through Redis holds after Redis goes away', async (t) => {
  // A gets TI's 429 with Retry-After 3; B's caller is refused through Redis (B learns the
  // cool-down); Redis goes away; B must not send inside TI's Retry-After.
  await holds(t, {
    size: 2,
    rules: [{ rule: 'GET /v2/store/**', paths: ['catalog', 'item', 'orders'], limits: [{ n: 50, windowMs: 10_000 }] }],
    env: { RATE_LIMIT_COOLDOWN_MS: '500' }
  }, [
    { op: 'call', s: 0, path: 'item', retryAfterS: 3 },
    call(1),
    { op: 'down' },
    call(1),
    { op: 'wait', ms: 300 },
    call(1)
  ])
})

t.test('a call that reached nobody spends nothing: the upstream refusing connections', async (t) => {
  // Found while the model was being built (a hand-written schedule of its commands), then
  // by the model as G2 failing right after an upstreamDown: two calls the upstream never
  // received (connection refused) kept their points, so with the upstream back the fleet
  // refused a call the tally had room for.
  await holds(t, { size: 3, ...MODEL_FLEET }, [
    call(0), call(1),
    { op: 'upstreamDown' },
    call(0), call(1),
    { op: 'heal' },
    call(0), call(1)
  ])
})

// Shrunk by model.test.ts on b0daccb, printed up to the step that broke the guarantee
// (the first three with the rule GET /v2/store/** at 4/1s 6/3s; its 6/2s now changes nothing
// in them: the catalog rule broke).

t.test('model: Redis frozen, a sidecar spends again the catalog call it spent through Redis', async (t) => {
  // G1, catalog 1/2s: the call spent through Redis was unknown to the in-memory fallback
  // the frozen Redis sent the sidecar to, so the second went out 110 ms after the first.
  await holds(t, { size: 2, ...MODEL_FLEET }, [
    { op: 'call', s: 0, path: 'catalog' },
    { op: 'wait', ms: 50 },
    { op: 'freeze' },
    { op: 'call', s: 0, path: 'catalog' }
  ])
})

t.test('model: Redis frozen, another sidecar spends the catalog call again', async (t) => {
  // G1, catalog 1/2s: with Redis frozen, the second sidecar spent the fleet's one catalog
  // call on its own budget, 300 ms after the first sidecar had spent it through Redis.
  await holds(t, { size: 2, ...MODEL_FLEET }, [
    { op: 'call', s: 0, path: 'catalog' },
    { op: 'wait', ms: 50 },
    { op: 'heal' },
    { op: 'freeze' },
    { op: 'call', s: 0, path: 'free' },
    { op: 'call', s: 1, path: 'catalog' }
  ])
})

t.test('model: one sidecar cut off from Redis, back on its own budget after the heal', async (t) => {
  // G1, catalog 1/2s: sidecar 0's connection to Redis was cut while the upstream refused
  // connections; after the heal it still answered from its own memory, which did not hold
  // sidecar 2's catalog call, and sent a second within 950 ms.
  await holds(t, { size: 3, ...MODEL_FLEET }, [
    { op: 'wait', ms: 921 },
    { op: 'heal' },
    { op: 'wait', ms: 1171 },
    { op: 'call', s: 2, path: 'catalog' },
    { op: 'call', s: 0, path: 'catalog', leaveAfterMs: 7 },
    { op: 'upstreamDown' },
    { op: 'call', s: 2, path: 'item' },
    { op: 'wait', ms: 847 },
    { op: 'cut', s: 0 },
    { op: 'call', s: 0, path: 'item' },
    { op: 'heal' },
    { op: 'call', s: 1, path: 'item' },
    { op: 'call', s: 0, path: 'catalog' }
  ])
})

t.test('model: Redis killed, a restarted sidecar spends the catalog call again', async (t) => {
  // G1, catalog 1/2s (found on b0daccb with seed -2073200390): sidecar 0 spent the catalog
  // call through Redis; Redis was killed, sidecar 1 restarted on its memory fallback and
  // sent a second catalog call 210 ms later (its caller had left, the call had gone out).
  await holds(t, { size: 2, ...MODEL_FLEET }, [
    { op: 'call', s: 0, path: 'catalog' },
    { op: 'down' },
    { op: 'wrongPassword' },
    { op: 'call', s: 0, path: 'orders' },
    { op: 'stall', s: 0 },
    { op: 'stall', s: 1 },
    { op: 'call', s: 1, path: 'item' },
    { op: 'restartSidecar', s: 1 },
    { op: 'wait', ms: 53 },
    { op: 'call', s: 1, path: 'catalog', leaveAfterMs: 15 }
  ])
})

// Open: fails about one run in two on the quota branch as merged here; a todo assertion,
// so it runs and reports without failing the suite until the implementation settles it.
t.test('model: after Redis was killed and came back empty, every sidecar sends again', async (t) => {
  // G2 (recovery; found on the quota branch, seed -877035814, group 3): Redis killed, one
  // sidecar restarted meanwhile, Redis started again empty; 4 s after, with every /status
  // saying backend redis, Redis up, not degraded, fleet 2 of 2, a sidecar (either one,
  // from run to run) still refused "cannot be checked (rate-limit redis not answering)".
  await holds(t, { size: 2, ...MODEL_FLEET }, [
    { op: 'call', s: 0, path: 'free' },
    { op: 'call', s: 1, path: 'free' },
    { op: 'call', s: 0, path: 'free' },
    { op: 'down' },
    { op: 'call', s: 1, path: 'catalog' },
    { op: 'call', s: 1, path: 'item' },
    { op: 'restartSidecar', s: 0 },
    { op: 'wait', ms: 1137 },
    { op: 'wait', ms: 53 },
    { op: 'wait', ms: 218 },
    { op: 'call', s: 1, path: 'orders' },
    { op: 'wrongPassword' },
    { op: 'wait', ms: 561 },
    { op: 'wait', ms: 725 },
    { op: 'wait', ms: 1189 },
    { op: 'wait', ms: 1067 },
    { op: 'call', s: 0, path: 'catalog' }
  ], { todo: 'intermittent on the quota branch: a refusal as "redis not answering" while /status says healthy' })
})

t.test('model: a refresh\'s claim that ran after Redis thawed does not hold the next miss for a lease', async (t) => {
  // G3 (seed -746856561, group 1; found when the Config went into sections, and on main
  // before it): a stale answer served while Redis was frozen claimed its refresh; the claim
  // timed out here and ran when Redis thawed, holding the key for a whole lease (5 s) with
  // nobody fetching: the next miss, past the stale window, was answered after 3,993 ms.
  await holds(t, { size: 3, ...MODEL_FLEET }, [
    { op: 'call', s: 0, path: 'cached' },
    { op: 'freeze' },
    { op: 'wait', ms: 3000 },
    { op: 'call', s: 0, path: 'cached' },
    { op: 'heal' },
    { op: 'wait', ms: 1500 },
    { op: 'call', s: 0, path: 'cached' }
  ])
})
