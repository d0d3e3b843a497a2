// An entry ended by time keeps its declaration (an outside review of the holds that end by
// time): ending by time dropped the entry with its declared size, yet past its bound a sidecar
// refuses, it does not exit: it still runs, one of the guarantee's first assumption. With its
// size gone the largest declared dropped, and the count released a lapsed sidecar that may be
// alive and spending alone. W = 400 ms, N = 12; b, c present declaring 2 (the old size), A
// declaring 4 (a rollout 2 → 4), k declaring 2. Running: A (past its bound), b, c, k = 4 ≤ 4.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import { ended, limit, fleet, lapse, outlastHolds, twoPresent, PREFIX, W, type F } from './rollout-fleet.js'

t.setTimeout(120_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W
const N = 12
/** What k may spend alone: it saw b, c and itself present, its share is N / 3. */
const ALONE = Math.floor(N / 3)

async function keep (f: F, present: Member[], ms: number): Promise<void> {
  const until = Date.now() + ms
  while (Date.now() < until) { await f.beat(...present); await sleep(100) }
}

/** What the fleet admits in a window once every release's hold has ended, while k may spend ALONE. */
async function admittedBesideK (t: Test, f: F, b: Member, c: Member): Promise<void> {
  await outlastHolds(f, [b, c], W)
  const shared = await f.admitted(b, [limit(N, W)], N)
  t.ok(shared + ALONE <= N, `the fleet admits ${shared} in W while k (alive) may spend ${ALONE} alone`)
}

for (const [name, spanA] of [['A ends by time while k is lapsed', SPAN_MS], ['control: A with no bound', 0]] as const) {
  t.test(name, async (t) => {
    const { f, b, c } = await twoPresent(t, SPAN_MS, 2)
    await lapse(f, { ...f.member('A', 4), aloneSpanMs: spanA })
    await lapse(f, { ...f.member('k', 2), aloneSpanMs: 0 })
    await f.beat(b, c)
    t.same(await f.lapsed(), ['A', 'k'], 'both held: the largest declared is 4')
    await keep(f, [b, c], SPAN_MS + 500)
    t.same(await f.lapsed(), ['A', 'k'], 'both still counted')
    t.same(await ended(f), spanA > 0 ? ['A'] : [], 'A\'s hold ended by time, k\'s not')
    await admittedBesideK(t, f, b, c)
  })
}

for (const [name, spanK] of [['A ended, then k lapses (no bound)', 0], ['A ended, then k lapses (bounded, 60 s)', 60_000]] as const) {
  t.test(name, async (t) => {
    const { f, b, c } = await twoPresent(t, SPAN_MS, 2)
    await lapse(f, f.member('A', 4))
    await keep(f, [b, c], SPAN_MS + 500)
    t.same(await ended(f), ['A'], 'A ended by time (alive, refusing past its bound), still counted')
    await lapse(f, { ...f.member('k', 2), aloneSpanMs: spanK })
    await f.beat(b, c)
    t.same(await f.lapsed(), ['A', 'k'], 'k not released: A\'s 4 still the largest')
    await admittedBesideK(t, f, b, c)
  })
}

// The count releases the ended first: released, y (the oldest, no bound) would spend alone past
// its release's one window, while x, kept, holds nothing (one of them stopped, not which).
t.test('the count releases an ended entry before one that holds', async (t) => {
  const f = await fleet(t, SPAN_MS)
  const b = f.member('b', 3)
  await f.join(b)
  await lapse(f, { ...f.member('y', 3), aloneSpanMs: 0 })
  await lapse(f, f.member('x', 3))
  await keep(f, [b], SPAN_MS + 500)
  t.same(await ended(f), ['x'], 'x ended by time, y holds (no bound)')
  const c = f.member('c', 3)
  await f.join(c)
  t.same(await f.lapsed(), ['y'], 'two present of 3: one released, the ended x')
  t.match(await f.admin.zrange(`${PREFIX}released`, '0', '-1'), [/^x@\d+~0$/], 'telling a span of 0: its sends alone are out of every window')
  await outlastHolds(f, [b, c], W)
  t.equal(await f.admitted(b, [limit(N, W)], N), N - N / 3, 'y\'s share still held')
})
