// An entry lapsed longer than a week ends only by the count, marked ended or not: the releases
// it may stand for may have been pruned unseen. x (this version) ended by time and was marked;
// the fleet then ran only an earlier version for over a week (a rollback): it released r (cut
// off, alive, spending alone without end) by age, scored after x's lapse (x may stand for r),
// and pruned that release. Rolled forward, honouring x's mark would hold nothing for r.
// Found by an outside review (16 sends under 12/W); the state is written into Redis directly.
import t from 'tap'
import { GHOST_KEEP_MS } from '../../../src/quota/redis-script-holds.js'
import { fleet, limit, PREFIX, W } from './rollout-fleet.js'

t.setTimeout(60_000)
const SPAN_MS = 1_000 + W
const N = 12
const DAY = 24 * 60 * 60_000

const cases = [
  ['x marked ended, lapsed 8 days; the release it stands for pruned', 'marked', 'pruned'],
  ['control: x not marked (its span), same state: held by the 7-day rule', 'span', 'pruned'],
  ['control: x marked, the release it stands for still kept: mark dropped', 'marked', 'kept']
] as const
for (const [name, told, release] of cases) {
  t.test(name, async (t) => {
    const f = await fleet(t, SPAN_MS)
    // b, c, d present declaring 3; x declared 4: the count keeps one lapsed (4 − 3).
    const b = f.member('b', 3)
    const c = f.member('c', 3)
    const d = f.member('d', 3)
    await f.join(b, c, d)
    const [s, us] = await f.admin.time()
    const now = Number(s) * 1000 + Math.floor(Number(us) / 1000)
    const S = now - GHOST_KEEP_MS - DAY
    await f.admin.zadd(`${PREFIX}lapsed`, S, 'x')
    await f.admin.hset(`${PREFIX}floors`, 'x', '4')
    await f.admin.hset(`${PREFIX}alone-spans`, 'x', told === 'marked' ? `ended:${S}` : `${SPAN_MS}:${S}`)
    // r's release by the earlier version (no span in its name), scored after x's lapse.
    const R = release === 'pruned' ? S + 3 * DAY : now + 2_000
    await f.admin.zadd(`${PREFIX}released`, R, `r@${R}`)
    await f.beat(b, c, d)
    t.same(await f.lapsed(), ['x'], 'x kept lapsed: 3 present, 4 the largest declared')
    const shared = await f.admitted(b, [limit(N, W)], N)
    const alone = Math.floor(N / 3)
    t.ok(shared + alone <= N, `b admitted ${shared} of ${N} in W while r (alive, x may stand for it) may spend ${alone} alone`)
  })
}
