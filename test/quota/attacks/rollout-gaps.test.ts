// Known open (an outside review of c7bde68): three ways a rollout that changes
// RATE_LIMIT_FLEET_SIZE still sends more than the budget, each with a control of one declared
// size that holds (strict). Released entries are counted, not named: a release drops that
// entry's declared size, though the sidecar it stood for may be the one still running.
//  (b) the smallest declarer x (3) released while alive: the lapsed entries left are held at
//      ⌊N/4⌋, x spends ⌊N/3⌋ alone;
//  (a) the largest declarer x (4) released while alive: the largest on record drops to 3,
//      the other lapsed entry is released too, x spends ⌊N/4⌋ alone;
//  (c, c2) Redis loses its data mid-rollout with the smallest declarer cut off: the unknown
//      entries are held at the sizes of those who came back.
// The rollout cases are todo (reported, not failed) until the scripts settle them.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import type { Limit } from '../../../src/config/rate-limit-rules.js'
import { sizedFleet, type SizedFleet } from '../fleet-redis.js'

const PREFIX = 'rv:'
const SCOPE = 'GET /r'
const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })

type F = SizedFleet
const fleet = async (t: Test, timeoutMs = 200): Promise<F> => await sizedFleet(t, PREFIX, { timeoutMs, ttlMs: 1_000, newRun: true, scope: SCOPE })

/** `m` present, then gone from Redis's sight without leaving (cut off: alive; or killed: dead). */
async function lapse (f: F, m: Member): Promise<void> {
  m.presenceTtlMs = 30
  await f.join(m)
  await sleep(80)
}

/** Keeps `present` present until every release made so far has ended its hold (release start ≤ now + ttl + timeout, then W). */
async function outlastHolds (f: F, present: Member[], W: number): Promise<void> {
  const until = Date.now() + 1_000 + 200 + W + 300
  while (Date.now() < until) { await f.beat(...present); await sleep(100) }
}

const W = 400

// (b) ----------------------------------------------------------------------------------------
for (const rollout of [false, true]) {
  t.test(`(b) smallest declarer released while alive${rollout ? '' : ' — control, one size'}`, async (t) => {
    const f = await fleet(t)
    const big = 4
    const xs = rollout ? 3 : 4
    // x: an old pod (declared 3), cut off from Redis and alive: it spends ⌊N/3⌋ alone.
    const y2 = f.member('y2', big)
    const y3 = f.member('y3', big)
    await f.join(y2, y3)
    await lapse(f, f.member('x', xs))
    // y1: a new pod (declared 4) whose node died: lapsed, never back.
    await lapse(f, f.member('y1', big))
    await f.beat(y2)
    t.same(await f.lapsed(), ['x', 'y1'], 'both lapsed')
    // y4 replaces y1: present 3, lapsed 2, largest on record 4 → one released: the oldest, x.
    const y4 = f.member('y4', big)
    await f.join(y4)
    await f.beat(y2)
    t.comment(`lapsed ${JSON.stringify(await f.lapsed())}, floors ${JSON.stringify(await f.floors())}`)
    await outlastHolds(f, [y2, y3, y4], W)
    const N = 12
    const shared = await f.admitted(y2, [limit(N, W)], N)
    const alone = Math.floor(N / xs)
    t.comment(`Redis admits ${shared}; x alone ${alone}: ${shared + alone} at TI under ${N}/W (running: x, y2, y3, y4 = 4, x declared ${xs}, others ${big})`)
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`, rollout ? { todo: 'known open: a rollout that changes RATE_LIMIT_FLEET_SIZE (docs/quota-guard.md)' } : {})
  })
}

// (a) ----------------------------------------------------------------------------------------
for (const rollout of [false, true]) {
  t.test(`(a) largest declarer released while alive${rollout ? '' : ' — control, one size'}`, async (t) => {
    const f = await fleet(t)
    const small = rollout ? 3 : 4 // control: everyone declares 4
    const b = f.member('b', small)
    const c = f.member('c', small)
    await f.join(b, c)
    await lapse(f, f.member('x', 4)) // alive, cut off: spends ⌊N/4⌋ alone
    await lapse(f, f.member('a', small)) // dead
    await f.beat(b)
    t.same(await f.lapsed(), ['x', 'a'])
    const d = f.member('d', small)
    await f.join(d)
    await f.beat(b)
    await f.beat(b)
    t.comment(`lapsed ${JSON.stringify(await f.lapsed())}, floors ${JSON.stringify(await f.floors())}`)
    await outlastHolds(f, [b, c, d], W)
    const N = 8
    const shared = await f.admitted(b, [limit(N, W)], N)
    const alone = Math.floor(N / 4)
    t.comment(`Redis admits ${shared}; x alone ${alone}: ${shared + alone} at TI under ${N}/W (running: x, b, c, d = 4 = x's declaration)`)
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`, rollout ? { todo: 'known open: a rollout that changes RATE_LIMIT_FLEET_SIZE (docs/quota-guard.md)' } : {})
  })
}

// (c) ----------------------------------------------------------------------------------------
for (const rollout of [false, true]) {
  t.test(`(c) data lost mid-rollout, smallest declarer cut off${rollout ? '' : ' — control, one size'}`, async (t) => {
    const f = await fleet(t)
    const big = 4
    const xs = rollout ? 3 : 4 // control: everyone declares 4
    const N = 12
    const lim = [limit(N, W)]
    const a = f.member('a', big)
    const b = f.member('b', big)
    const c = f.member('c', big)
    await f.join(a, b, c)
    await lapse(f, f.member('x', xs)) // cut off before the loss, sent nothing in the window
    await f.beat(a)
    await f.admin.flushall()
    // a and b come back: each re-asserts (the first finds the epoch gone: lost; the others lapsed).
    for (const m of [a, b, c]) {
      const r = await f.store.reassert(m, [{ scope: SCOPE, limit: lim[0] as Limit, sends: [] }], 'e2')
      m.epoch = r.epoch
    }
    await f.beat(a)
    t.comment(`lapsed ${JSON.stringify(await f.lapsed())}, floors ${JSON.stringify(await f.floors())}`)
    // Past the gate (a window) and every release's hold.
    await outlastHolds(f, [a, b, c], W)
    const shared = await f.admitted(a, lim, N)
    const alone = Math.floor(N / xs)
    t.comment(`Redis admits ${shared}; x alone ${alone}: ${shared + alone} at TI under ${N}/W (x declared ${xs}, a, b, c ${big}; running x, a, b, c = 4)`)
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`, rollout ? { todo: 'known open: a rollout that changes RATE_LIMIT_FLEET_SIZE (docs/quota-guard.md)' } : {})
  })
}

// (c2) ---------------------------------------------------------------------------------------
// After the loss the 'unknown' entries are counted by the FIRST re-asserter's own size − 1:
// an old pod (3) first back creates 2, while three new pods (4) are cut off through the loss.
for (const rollout of [false, true]) {
  t.test(`(c2) data lost mid-rollout, the first back declares the smaller size${rollout ? '' : ' — control, one size'}`, async (t) => {
    const f = await fleet(t)
    const N = 12
    const lim = [limit(N, W)]
    const first = rollout ? 3 : 4
    const a = f.member('a', first)
    await f.join(a)
    for (const id of ['x1', 'x2', 'x3']) await lapse(f, f.member(id, 4)) // cut off: alive, ⌊N/4⌋ each alone
    await f.beat(a)
    await f.admin.flushall()
    const r = await f.store.reassert(a, [{ scope: SCOPE, limit: lim[0] as Limit, sends: [] }], 'e2')
    a.epoch = r.epoch
    t.comment(`lapsed ${JSON.stringify(await f.lapsed())}, floors ${JSON.stringify(await f.floors())}`)
    await outlastHolds(f, [a], W)
    const shared = await f.admitted(a, lim, N)
    const alone = 3 * Math.floor(N / 4)
    t.comment(`Redis admits ${shared}; x1..x3 alone ${alone}: ${shared + alone} at TI under ${N}/W (a declared ${first}, x1..x3 4; running 4)`)
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`, rollout ? { todo: 'known open: a rollout that changes RATE_LIMIT_FLEET_SIZE (docs/quota-guard.md)' } : {})
  })
}
