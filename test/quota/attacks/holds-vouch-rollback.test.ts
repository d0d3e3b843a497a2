// A vouching restart after a rollback (an outside review of the holds that end by time): x ran
// this version, whose STATE_DIR file says it holds every send alone; rolled back on the same
// STATE_DIR, the earlier version could not write it (a read-only or full disk), was cut off and
// sent alone all the same; rolled forward, the file vouched and x's lapse ended at once, though
// it lacks those sends. A lapse ends with a run only if this version renewed it last.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { earlierVersion } from './earlier-version.js'
import { fleet, limit, W } from './rollout-fleet.js'

t.setTimeout(60_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W

for (const [name, rolledBack, spanMs] of [
  ['x ran the earlier version last: its lapse held past the vouching run', true, SPAN_MS],
  ['control: x ran this version last: its lapse ends with the vouching run', false, SPAN_MS],
  ['control: x ran this version last with no bound (no span): ends too', false, 0]
] as const) {
  t.test(name, async (t) => {
    const f = await fleet(t, spanMs)
    const b = f.member('b', 2)
    const c = f.member('c', 2)
    await f.join(b, c)
    const x = f.member('x', 3, 30)
    await f.join(x)
    // The earlier version's run under the same id (its first contact), lapsing later than the first's.
    if (rolledBack) await earlierVersion(f.admin).join(f.member('x', 3, 300))
    await sleep(rolledBack ? 400 : 80)
    await f.beat(b, c)
    t.ok((await f.lapsed()).includes('x'), 'x cut off, lapsed')
    // This version again, vouching for its file (read whole, this version's, this boot's).
    const again = f.member('x', 3)
    again.vouches = true
    await f.join(again)
    const admitted = await f.admitted(b, [limit(4, W)], 4)
    if (rolledBack) t.ok(admitted <= 2, `b admitted ${admitted} of 4 while x's share (2) stays held`)
    else t.equal(admitted, 4, 'x\'s lapse ended: nothing held')
  })
}
