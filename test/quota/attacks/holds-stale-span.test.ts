// A stale span (an outside review of the holds that end by time): earlier versions renew a
// member's presence without touching its span (alone-spans), so a member id that ran this
// version, then an earlier one (a rollback keeping STATE_DIR), kept this version's span; when
// the earlier version's process lapsed, its entry ended after that span although it spends
// alone without end. A span counts only with the presence it was written with.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { ended, fleet, limit, PREFIX, W, type F } from './rollout-fleet.js'

t.setTimeout(60_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W

/**
 * y's presence as an earlier version renews it: a member entry and its size, no span. Lapsing
 * in 50 ms, not this version's 30: a renewal in the same millisecond would end where the span's did.
 */
async function renewAsEarlierVersion (f: F): Promise<void> {
  const [s, us] = await f.admin.time()
  const now = Number(s) * 1000 + Math.floor(Number(us) / 1000)
  await f.admin.zadd(`${PREFIX}members`, now + 50, 'y')
  await f.admin.hset(`${PREFIX}floors`, 'y', '3')
}

for (const [name, rolledBack] of [['y ran this version, then an earlier one: held to the count', true], ['control: y ran this version alone: its hold ends by time', false]] as const) {
  t.test(name, async (t) => {
    const f = await fleet(t, SPAN_MS)
    const b = f.member('b', 2)
    const c = f.member('c', 2)
    await f.join(b, c)
    const y = f.member('y', 3)
    y.presenceTtlMs = 30
    await f.join(y)
    if (rolledBack) await renewAsEarlierVersion(f)
    await sleep(80)
    await f.beat(b, c)
    t.same(await f.lapsed(), ['y'], 'y cut off: two present of 2 cannot release one declaring 3')
    const until = Date.now() + SPAN_MS + 1_500
    while (Date.now() < until) { await f.beat(b, c); await sleep(100) }
    t.same(await ended(f), rolledBack ? [] : ['y'], rolledBack ? 'y (an earlier version: no bound) still held' : 'y\'s hold ended after its span')
    t.same(await f.lapsed(), ['y'], 'counted either way: it may still run')
    t.equal(await f.admitted(b, [limit(4, W)], 4), rolledBack ? 2 : 4, 'y\'s share of 4 / 2 held or not')
  })
}
