// Ways a rollout that changes RATE_LIMIT_FLEET_SIZE sent more than the budget (an outside
// review of c7bde68, and (d) after it), each beside a control of one declared size. Released
// entries are counted, not named: the sidecar a released entry stood for may be the one still
// running, so its size stays held while any entry is lapsed (redis-scripts.ts, held sizes).
// The cases are split over three files, so that each runs in seconds and they run in parallel:
// this one, Redis losing its data mid-rollout:
//  (c, c2) with the smallest declarer cut off: the unknown entries were held at the sizes of
//      those who came back (now: the sizes they last saw);
//  (c3) the limit left: a size no sidecar back from a data loss saw (docs/quota-guard.md).
import t from 'tap'
import type { Limit } from '../../../src/config/rate-limit-rules.js'
import { SCOPE, limit, fleet, lapse, outlastHolds, W } from './rollout-fleet.js'

// Each case outlasts its holds in real time (~2.7 s): the whole file, 7–20 s with the machine busy.
t.setTimeout(120_000)

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
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`)
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
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`)
  })
}

// (c3) A limit: a size no sidecar back saw (it joined after their last script, and Redis lost
// it with the rest) is held as the smallest they saw; a data loss while sidecars are cut off
// is outside the guarantee's third assumption anyway. Over by at most ⌊N/3⌋ − ⌊N/4⌋.
for (const xs of [4, 3]) {
  t.test(`(c3) data lost before anyone back saw the cut-off sidecar's size ${xs}${xs === 4 ? ' — control, one size' : ': over by at most ⌊N/3⌋ − ⌊N/4⌋'}`, async (t) => {
    const f = await fleet(t)
    const N = 12
    const lim = [limit(N, W)]
    const a = f.member('a', 4)
    await f.join(a)
    await lapse(f, f.member('x', xs)) // a runs no script meanwhile: it never saw x's size
    await f.admin.flushall()
    a.epoch = (await f.store.reassert(a, [{ scope: SCOPE, limit: lim[0] as Limit, sends: [] }], 'e2')).epoch
    await outlastHolds(f, [a], W)
    const shared = await f.admitted(a, lim, N)
    t.equal(shared, N - 3 * Math.floor(N / 4), 'three unknown entries held at the size a saw, ⌊N/4⌋ each')
    t.ok(shared + Math.floor(N / xs) <= N + Math.floor(N / xs) - Math.floor(N / 4), `within the bound: ${shared} + ${Math.floor(N / xs)}`)
  })
}
