// Holds without end (an outside review of the held sizes): a lapsed entry was never released by
// time, so a pod that died without leaving was held against the fleet until enough sidecars ran
// that the count released it, which after a size-lowering rollout may be never; a crash loop
// held a share per restart. Now a sidecar spends alone for at most RATE_LIMIT_ALONE_MAX_MS, so
// an entry ends once that bound + its longest window (its span) has passed since its presence;
// and a restart whose ledger holds every send of its earlier runs ends its own entry
// (docs/quota-guard.md, "Restarts and replacements"). Each beside a control that keeps the hold.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import { limit, fleet, lapse, outlastHolds, beatUntilEnded, ended, PREFIX, W, type F } from './rollout-fleet.js'

t.setTimeout(120_000)
/** RATE_LIMIT_ALONE_MAX_MS + the longest window, shortened. */
const SPAN_MS = 1_000 + W

const redisNow = async (f: F): Promise<number> => {
  const [s, us] = await f.admin.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}
/** Each lapsed entry's score: when its presence ended, in Redis's time. */
const lapsedAt = async (f: F): Promise<Map<string, number>> => {
  const flat = await f.admin.zrange(`${PREFIX}lapsed`, '0', '-1', 'WITHSCORES')
  const out = new Map<string, number>()
  for (let i = 0; i < flat.length; i += 2) out.set(flat[i] as string, Number(flat[i + 1]))
  return out
}
t.test('a rollout 4 → 3 in which a pod of each size died: the whole budget once every hold has ended', async (t) => {
  for (const [name, span] of [['with a bound on spending alone', SPAN_MS], ['control: no bound recorded (an earlier version): held', 0]] as const) {
    await t.test(name, async (t) => {
      const f = await fleet(t, span)
      const b = f.member('b', 3)
      const c = f.member('c', 3)
      await f.join(b, c)
      await lapse(f, f.member('x', 4))
      await lapse(f, f.member('y', 3))
      const d = f.member('d', 3)
      await f.join(d)
      // x released by the count (three present of 4), y left: it may stand for x.
      t.same(await f.lapsed(), ['y'])
      const endedAt = await beatUntilEnded(f, [b, c, d], SPAN_MS + 2_000)
      const N = 12
      if (span === 0) {
        t.equal(endedAt, undefined, 'y holds on: nothing bounds how long it spends alone')
        t.equal(await f.admitted(b, [limit(N, W)], N), N - Math.floor(N / 3), 'its share held')
        return
      }
      t.not(endedAt, undefined, 'y\'s entry ended by time')
      await outlastHolds(f, [b, c, d], W)
      t.equal(await f.admitted(b, [limit(N, W)], N), N, 'three present, all declaring 3, nothing sent')
      // Past its bound a sidecar refuses but may run: y is counted, and x's size with it.
      t.same(await f.lapsed(), ['y'], 'y still counted')
      t.equal((await f.floors()).y, '3', 'its size on record')
      t.equal((await f.admin.hgetall(`${PREFIX}held-sizes`)).hi, '4', 'the size released for it still held')
    })
  }
})

t.test('a held share is released once the span has passed since the presence ended, not before', async (t) => {
  // Two present of 2, x declaring 3: the count cannot release it (3 may run), time must.
  const f = await fleet(t, SPAN_MS)
  const b = f.member('b', 2)
  const c = f.member('c', 2)
  await f.join(b, c)
  await lapse(f, f.member('x', 3))
  await f.beat(b, c)
  const at = (await lapsedAt(f)).get('x')
  if (at === undefined) throw new Error('x is not lapsed')
  t.ok(await redisNow(f) < at + SPAN_MS, 'within the span')
  t.equal(await f.admitted(b, [limit(4, W)], 4), 2, 'x\'s share held: it may be cut off, spending alone')
  const endedAt = await beatUntilEnded(f, [b, c], SPAN_MS + 2_000)
  if (endedAt === undefined) throw new Error('x\'s entry never ended')
  t.ok(endedAt >= at + SPAN_MS, `ended ${endedAt - at} ms after its presence, at least the span (${SPAN_MS} ms)`)
  t.same(await ended(f), ['x'], 'x still counted (it may run, refusing), its share no longer held')
  t.equal((await f.floors()).x, '3', 'its size on record: two present of 3 still cannot release it')
  // b's own sends leave the window; then the whole limit.
  await sleep(W + 50)
  t.equal(await f.admitted(b, [limit(4, W)], 4), 4, 'nothing held')
})

t.test('a crash loop: restarts that lapsed for 80 ms each hold no share', async (t) => {
  const loop = async (f: F, y: Member): Promise<number> => {
    const b = f.member('b', 3)
    const c = f.member('c', 3)
    await f.join(b, c)
    for (let i = 0; i < 4; i++) {
      await lapse(f, y)
      await f.beat(b)
    }
    y.presenceTtlMs = 1_000
    await f.join(y)
    // Past the releases' start (TTL + timeout), all three kept present (a bare sleep would let
    // them lapse: one present of 3 holds two absent shares); the window is far longer than any lapse.
    const until = Date.now() + 2_500
    while (Date.now() < until) { await f.beat(b, c, y); await sleep(100) }
    return await f.admitted(b, [limit(6, 60_000)], 6)
  }
  await t.test('its ledger holds every send of its earlier runs: each entry ends with the next run', async (t) => {
    const f = await fleet(t, 60_000 + SPAN_MS)
    const y = { ...f.member('y', 3), vouches: true }
    t.equal(await loop(f, y), 6, 'no lapse stood for anything its ledger did not tell')
    t.same(await f.lapsed(), [])
  })
  await t.test('control: a ledger not whole (a rule gone, a file unreadable) keeps each entry, released by the count', async (t) => {
    const f = await fleet(t, 60_000 + SPAN_MS)
    const y = f.member('y', 3)
    t.ok(await loop(f, y) < 6, 'a share held per restart for a window')
  })
})

t.test('a restart vouching for its ledger keeps its entry when the count released one while it was lapsed (it may stand for that one)', async (t) => {
  const f = await fleet(t, 60_000 + SPAN_MS)
  const b = f.member('b', 3)
  await f.join(b)
  await lapse(f, f.member('x', 3))
  await lapse(f, f.member('y', 3))
  await f.beat(b)
  t.same(await f.lapsed(), ['x', 'y'], 'one present of 3: both may run')
  await f.join(f.member('c', 3))
  t.same(await f.lapsed(), ['y'], 'two present: x released by the count, perhaps the one still cut off')
  await f.join({ ...f.member('y', 3), vouches: true })
  // Kept under a name of its own, then released by the count (three present): held one more window.
  t.match(await f.admin.zrange(`${PREFIX}released`, '0', '-1'), [/^x@\d+~\d+$/, /^y#\d+@\d+~\d+$/], 'the ledger vouches for y, not for x')
})

t.test('an entry that may stand for one released without a span (an earlier version\'s release) ends only by the count', async (t) => {
  const f = await fleet(t, SPAN_MS)
  const b = f.member('b', 2)
  const c = f.member('c', 2)
  await f.join(b, c)
  await lapse(f, f.member('x', 3))
  await f.beat(b, c)
  // Released as an earlier version names it (id@time, no span), after x lapsed.
  const now = await redisNow(f)
  await f.admin.zadd(`${PREFIX}released`, now + 2_000, `old@${now + 2_000}`)
  t.equal(await beatUntilEnded(f, [b, c], SPAN_MS + 1_000), undefined, 'x holds past its own span')
})
