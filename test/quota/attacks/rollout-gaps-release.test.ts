// Ways a rollout that changes RATE_LIMIT_FLEET_SIZE sent more than the budget (an outside
// review of c7bde68, and (d) after it), each beside a control of one declared size. Released
// entries are counted, not named: the sidecar a released entry stood for may be the one still
// running, so its size stays held while any entry is lapsed (redis-scripts.ts, held sizes).
// The cases are split over three files, so that each runs in seconds and they run in parallel:
// this one, a release while alive and a restart:
//  (b) the smallest declarer x (3) released while alive: the lapsed entries left were held at
//      ⌊N/4⌋, x spends ⌊N/3⌋ alone;
//  (a) the largest declarer x (4) released while alive: the largest on record dropped to 3,
//      the other lapsed entry was released too, x spends ⌊N/4⌋ alone;
//  (d) a restart's entry released while it stood for a released sidecar still running.
import t from 'tap'
import { limit, fleet, lapse, outlastHolds, W } from './rollout-fleet.js'

// Each case outlasts its holds in real time (~2.7 s): the whole file, 7–20 s with the machine busy.
t.setTimeout(120_000)

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
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`)
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
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`)
  })
}

// (d) ----------------------------------------------------------------------------------------
// A new run of a lapsed sidecar (a restart keeping its member id) cannot vouch for what its
// lapse entry stood for: after x's release, y's entry is the one that holds x's share.
for (const rollout of [false, true]) {
  t.test(`(d) a restart's lapse entry stands for a released sidecar still running${rollout ? '' : ' — control, one size'}`, async (t) => {
    const f = await fleet(t)
    const big = 4
    const xs = rollout ? 3 : 4
    const b = f.member('b', big)
    const c = f.member('c', big)
    await f.join(b, c)
    await lapse(f, f.member('x', xs)) // alive, cut off: spends ⌊N/xs⌋ alone
    const y = f.member('y', big)
    await lapse(f, y) // its process dies
    const d = f.member('d', big)
    await f.join(d)
    await f.beat(b)
    t.same(await f.lapsed(), ['y'], 'present 3 of 4: one released, the oldest (x, alive)')
    await f.store.leave(d)
    // y's pod restarts (STATE_DIR kept its id): a new run, present again.
    y.presenceTtlMs = 1_000
    await f.store.reassert(y, [], 'e', true)
    await f.beat(b)
    t.comment(`lapsed ${JSON.stringify(await f.lapsed())}, floors ${JSON.stringify(await f.floors())}`)
    await outlastHolds(f, [b, c, y], W)
    const N = 12
    const shared = await f.admitted(b, [limit(N, W)], N)
    const alone = Math.floor(N / xs)
    t.comment(`Redis admits ${shared}; x alone ${alone}: ${shared + alone} at TI under ${N}/W (running: x, b, c, y = 4)`)
    t.ok(shared + alone <= N, `never over: ${shared} + ${alone} <= ${N}`)
  })
}
