// The earlier version's release beside an ended mark (an outside review of the holds that end
// by time): its scripts release the oldest lapsed entries, not the ended ones first, so a join
// on it released y (the earlier version, alive, spending alone without end) and kept x (this
// version's, dead, ended by time), which this version held as nothing. An ended entry stays
// counted with its size: it is held until the count releases it, whichever version releases.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { earlierVersion } from './earlier-version.js'
import { ended, keepPresent, lapse, limit, outlastHolds, twoPresent, W } from './rollout-fleet.js'

t.setTimeout(60_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W
const N = 12

for (const [name, earlierD] of [['d joins on the earlier version', true], ['control: d joins on this version', false]] as const) {
  t.test(name, async (t) => {
    const { f, b, c } = await twoPresent(t, SPAN_MS, 2)
    const earlier = earlierVersion(f.admin)
    // y on the earlier version, declaring 4, cut off: spends ⌊N/4⌋ alone without end.
    await earlier.join(f.member('y', 4, 30))
    await sleep(80)
    await lapse(f, f.member('x', 4)) // x on this version, declaring 4, dies
    await f.beat(b, c)
    t.same(await f.lapsed(), ['y', 'x'], 'both lapsed, y first')
    await keepPresent(f, [b, c], SPAN_MS + 500)
    t.same(await ended(f), ['x'], 'x ended by time')
    const d = f.member('d', 2)
    if (earlierD) await earlier.join(d); else await f.join(d)
    await outlastHolds(f, [b, c, d], W)
    const shared = await f.admitted(b, [limit(N, W)], N)
    const alone = Math.floor(N / 4)
    t.ok(shared + alone <= N, `b admitted ${shared} in W while y (alive) may spend ${alone} alone`)
  })
}
