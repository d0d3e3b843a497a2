// Holds through a released entry (an outside review of the holds that end by time): an entry
// that stands for one released by the count stands for all that one stood for. The release's
// name told only its own span, so a chain "d may stand for C, and C stood for A" was cut: d's
// entry ended after C's span although A, alive and cut off, spends alone longer (a larger
// RATE_LIMIT_ALONE_MAX_MS) or without end (an earlier version). The fleet then admitted 12 of
// 12 while A spent 3 alone. W = 400 ms, N = 12, b and c present declaring 3.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import { limit, fleet, lapse, outlastHolds, W, type F } from './rollout-fleet.js'

t.setTimeout(120_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened: that of b, c, C, d, e. */
const SPAN_MS = 1_000 + W

async function keep (f: F, present: Member[], ms: number): Promise<void> {
  const until = Date.now() + ms
  while (Date.now() < until) { await f.beat(...present); await sleep(100) }
}

for (const [name, spanA] of [['A an earlier version (no span: spends alone without end)', 0], ['A with a larger RATE_LIMIT_ALONE_MAX_MS (span 60 s)', 60_000]] as const) {
  t.test(`d stands for C, which stood for A: ${name}`, async (t) => {
    const f = await fleet(t, SPAN_MS)
    const b = f.member('b', 3)
    const c = f.member('c', 3)
    await f.join(b, c)
    // A (declaring 4) is cut off and alive, spending alone; C (3) died.
    await lapse(f, { ...f.member('A', 4), aloneSpanMs: spanA })
    await lapse(f, f.member('C', 3))
    await f.beat(b, c)
    t.same(await f.lapsed(), ['A', 'C'])
    const d = f.member('d', 3)
    await f.join(d)
    t.same(await f.lapsed(), ['C'], 'A released by the count: C may stand for A')
    // d runs past A's release start (TTL + timeout), then dies.
    await keep(f, [b, c, d], 2_500)
    await lapse(f, d)
    await f.beat(b, c)
    t.same(await f.lapsed(), ['C', 'd'])
    const e = f.member('e', 3)
    await f.join(e)
    t.same(await f.lapsed(), ['d'], 'C released by the count: d may stand for C, so for A')
    // b, c, e present past d's own span and past every release's hold.
    await keep(f, [b, c, e], SPAN_MS + 500)
    t.same(await f.lapsed(), ['d'], 'd kept: A may still spend alone')
    await outlastHolds(f, [b, c, e], W)
    const N = 12
    const alone = Math.floor(N / 4)
    const shared = await f.admitted(b, [limit(N, W)], N)
    t.ok(shared + alone <= N, `the fleet admits ${shared} in W while A may spend ${alone} alone`)
  })
}
