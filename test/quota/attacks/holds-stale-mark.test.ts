// A stale ended mark (an outside review of the holds that end by time): x, this version, lapsed
// and ended by time, came back on the earlier version (a rollback keeping STATE_DIR: same id),
// whose scripts never touch alone-spans; cut off again, spending alone without end, its new
// lapse read the mark left from the first and was held as ended at once. A mark counts only
// for the lapse it was written for (its score).
import t from 'tap'
import { earlierVersion } from './earlier-version.js'
import { ended, keepPresent, lapse, limit, outlastHolds, PREFIX, twoPresent, W } from './rollout-fleet.js'

t.setTimeout(60_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W
const N = 12

for (const [name, marked] of [['x ended by time, back on the earlier version, cut off again: held', true], ['control: the mark removed by hand', false]] as const) {
  t.test(name, async (t) => {
    const { f, b, c } = await twoPresent(t, SPAN_MS, 2)
    const earlier = earlierVersion(f.admin)
    await lapse(f, f.member('x', 4))
    await keepPresent(f, [b, c], SPAN_MS + 500)
    t.same(await ended(f), ['x'], 'x ended by time')
    if (!marked) await f.admin.hdel(`${PREFIX}alone-spans`, 'x')
    // The earlier version's first contact: its lapsed entry kept as x#time; d's join releases it.
    const x = f.member('x', 4, 1_000)
    await earlier.join(x)
    const d = f.member('d', 2)
    await f.join(d)
    // x (the earlier version) cut off: lapses, alive, spending ⌊N/4⌋ alone without end.
    await keepPresent(f, [b, c, d], 1_300)
    t.same(await f.lapsed(), ['x'], 'x lapsed again')
    await outlastHolds(f, [b, c, d], W)
    const shared = await f.admitted(b, [limit(N, W)], N)
    const alone = Math.floor(N / 4)
    t.ok(shared + alone <= N, `b admitted ${shared} in W while x (alive) may spend ${alone} alone`)
  })
}
