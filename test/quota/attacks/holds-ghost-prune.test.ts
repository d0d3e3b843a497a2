// Holds past the releases' pruning (an outside review of the holds that end by time): a
// released name is kept GHOST_KEEP_MS (7 days), then pruned. An entry lapsed longer than that
// may have stood for one pruned unseen (an earlier version's release, whose sidecar spends
// alone without end): it ends only by the count, never by its own span.
import t from 'tap'
import { GHOST_KEEP_MS } from '../../../src/quota/redis-scripts.js'
import { ended, fleet, lapse, limit, PREFIX, W } from './rollout-fleet.js'

/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W

for (const [name, lapsedAgo] of [['x lapsed 7 days + 10 s ago: held to the count', GHOST_KEEP_MS + 10_000], ['control: x lapsed 7 days − 60 s ago: its hold ended by its span', GHOST_KEEP_MS - 60_000]] as const) {
  t.test(name, async (t) => {
    const f = await fleet(t, SPAN_MS)
    const b = f.member('b', 2)
    const c = f.member('c', 2)
    await f.join(b, c)
    await lapse(f, f.member('x', 3))
    await f.beat(b, c)
    t.same(await f.lapsed(), ['x'])
    // The state days on: x lapsed then, its span stored with that presence's end.
    const [s, us] = await f.admin.time()
    const at = Number(s) * 1000 + Math.floor(Number(us) / 1000) - lapsedAgo
    await f.admin.zadd(`${PREFIX}lapsed`, 'XX', at, 'x')
    await f.admin.hset(`${PREFIX}alone-spans`, 'x', `${SPAN_MS}:${at}`)
    await f.beat(b, c)
    const held = lapsedAgo > GHOST_KEEP_MS
    t.same(await ended(f), held ? [] : ['x'], held ? 'x holds' : 'x ended: counted, holding nothing')
    t.same(await f.lapsed(), ['x'], 'counted either way: it may still run')
    t.equal(await f.admitted(b, [limit(4, W)], 4), held ? 2 : 4, 'x\'s share of 4 / 2 held or not')
  })
}
