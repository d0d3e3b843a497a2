// Ways a rollout that changes RATE_LIMIT_FLEET_SIZE sent more than the budget (an outside
// review of c7bde68, and (d) after it), each beside a control of one declared size. Released
// entries are counted, not named: the sidecar a released entry stood for may be the one still
// running, so its size stays held while any entry is lapsed (redis-scripts.ts, held sizes).
// The cases are split over three files, so that each runs in seconds and they run in parallel:
// this one, the limit left in an upgrade:
//  (e) an earlier version's sidecar records no size (docs/quota-guard.md: upgrade first).
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import { PREFIX, limit, fleet } from './rollout-fleet.js'

// (e) The limit left -------------------------------------------------------------------------
// A sidecar of a version before the records (it writes no size) is held as the smallest size
// on record: in an upgrade that also changes the size, a cut-off one of them spends
// ⌊N / its size⌋ against ⌊N / the smallest on record⌋ held (docs/quota-guard.md: upgrade first).
for (const oldSize of [4, 3]) {
  t.test(`(e) an earlier version's sidecar declaring ${oldSize} cut off, new ones 4${oldSize === 4 ? ' — control, one size' : ': over by at most ⌊N/3⌋ − ⌊N/4⌋'}`, async (t) => {
    const f = await fleet(t)
    const n = ['n1', 'n2', 'n3'].map((id) => f.member(id, 4))
    await f.join(...n)
    // Its presence as that version writes it: a member entry, no record of its size.
    const redisNow = Number((await f.admin.time())[0]) * 1000
    await f.admin.zadd(`${PREFIX}members`, redisNow + 30, 'old')
    await sleep(80)
    await f.beat(...n)
    t.same(await f.lapsed(), ['old'], 'lapsed: three present of 4')
    const N = 12
    const shared = await f.admitted(n[0] as Member, [limit(N, 3_600_000)], N)
    const alone = Math.floor(N / oldSize)
    t.equal(shared, N - Math.floor(N / 4), 'held as the smallest size on record, ⌊N/4⌋')
    t.ok(shared + alone <= N + Math.floor(N / oldSize) - Math.floor(N / 4), `within the bound: ${shared} + ${alone}`)
  })
}
