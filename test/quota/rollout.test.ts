// A rollout that changes RATE_LIMIT_FLEET_SIZE (the chart derives it from replicaCount) runs
// sidecars declaring different sizes side by side, on a real redis-server. A sidecar cut off
// spends ⌊N / its own size⌋ alone (fleet-alone.ts); the promise: whoever's script runs, Redis
// holds at least that for it, and releases a lapsed one only when no declaration on record
// lets it still run. The first cases are an outside review's reproductions.
import t, { type Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../src/quota/redis-backend.js'
import type { Limit } from '../../src/config/rate-limit-rules.js'
import { sizedFleet, type SizedFleet } from './fleet-redis.js'

const PREFIX = 'rollout:'
const HOUR_MS = 3_600_000
const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })

type Fleet = SizedFleet
const fleet = async (t: Test, timeoutMs = 2_000): Promise<Fleet> => await sizedFleet(t, PREFIX, { timeoutMs })

/** `m` joins and is cut off: its presence lapses (30 ms; waited on Redis's clock, more is only more lapsed). */
async function cutOff (f: Fleet, m: Member): Promise<void> {
  m.presenceTtlMs = 30
  await f.join(m)
  await sleep(100)
}

t.test('a rollout raising the size 2 -> 3: a new sidecar holds a cut-off old one\'s share by the old size', async (t) => {
  const f = await fleet(t)
  const old = f.member('old', 2)
  await cutOff(f, old)
  const n = f.member('new', 3)
  t.equal(await f.join(n), 1)
  const lim = [limit(2, HOUR_MS)]
  const [peeked] = await f.store.peek(n.epoch, 3, 'GET /r', lim) ?? []
  // old spends ⌊2/2⌋ = 1 alone; the new one's own size would hold ⌊2/3⌋ = 0 for it.
  const ok = await f.admitted(n, lim, 2)
  t.equal(ok, 1, 'TI receives 1 + old\'s 1 alone in a window under 2/W')
  t.equal(peeked?.left, ok, 'the RateLimit fields counted the same')
  t.same(await f.lapsed(), ['old'], 'old still lapsed: it may run, by either size')
})

t.test('the chart\'s 2 -> 3 replicas (declared 3 -> 4): the surge pod holds a cut-off old pod\'s share', async (t) => {
  const f = await fleet(t)
  const b = f.member('b', 3)
  const n = f.member('n', 4)
  await f.join(b)
  await cutOff(f, f.member('a', 3))
  t.equal(await f.join(n), 2)
  await f.store.heartbeat(b, [])
  // a spends ⌊3/3⌋ = 1 alone; n's own size would hold ⌊3/4⌋ = 0 for it.
  t.equal(await f.admitted(n, [limit(3, HOUR_MS)], 3), 2, 'TI receives 2 + a\'s 1 alone under 3/W')
})

t.test('an old sidecar does not release a cut-off new one: releases go by the largest size on record', async (t) => {
  // Old pods declare 3, new ones 4: four run (old1, old2, n1, x), within the new size. x is
  // cut off, alive, spending ⌊4/4⌋ = 1 alone. Present 3 = old1's own size: by that alone, x
  // has stopped and is released, its hold ending a window after the release.
  const f = await fleet(t, 200)
  const ttl = 3_000
  const present = [f.member('old1', 3, ttl), f.member('old2', 3, ttl)]
  await f.join(...present)
  await cutOff(f, f.member('x', 4))
  present.push(f.member('n1', 4, ttl))
  await f.join(present[2] as Member)
  const old1 = present[0] as Member
  await f.store.heartbeat(old1, [])
  t.same(await f.lapsed(), ['x'], 'x still lapsed: by the new size 4, it may be running')
  const W = 300
  // Past when a release made now would have ended its hold (its start: the latest presence
  // expiry; then one window), the members kept present meanwhile.
  const until = Date.now() + ttl + 200 + W + 200
  while (Date.now() < until) {
    for (const m of present) await f.store.heartbeat(m, [])
    await sleep(100)
  }
  t.equal(await f.admitted(old1, [limit(4, W)], 4), 3, 'x\'s share still held: 3 + x\'s 1 alone under 4/W')
})

t.test('a released sidecar\'s share is held by the size it declared, not by those still on record', async (t) => {
  // old (declared 2) is cut off; three new ones (declared 3) present: by every declaration on
  // record, old has stopped. What it may have sent alone before (⌊4/2⌋ = 2) is held a window.
  const f = await fleet(t)
  await cutOff(f, f.member('old', 2))
  const [a, b, c] = ['a', 'b', 'c'].map((id) => f.member(id, 3)) as [Member, Member, Member]
  t.equal(await f.join(a, b, c), 3)
  t.same(await f.lapsed(), [], 'released')
  t.same(await f.floors(), { a: '3', b: '3', c: '3' }, 'its record gone with it')
  t.equal(await f.admitted(a, [limit(4, HOUR_MS)], 4), 2, 'old\'s ⌊4/2⌋ = 2 held, not ⌊4/3⌋ = 1')
})

t.test('a release out of the window no longer lowers the shares held for the lapsed', async (t) => {
  const f = await fleet(t)
  // A sidecar declaring 2 released 10 s ago (its entry since forgotten).
  await f.admin.hset(`${PREFIX}released-floors`, '2', Date.now() - 10_000)
  const a = f.member('a', 3)
  await f.join(a, f.member('b', 3))
  await cutOff(f, f.member('d', 3))
  await f.store.heartbeat(a, [])
  t.same(await f.lapsed(), ['d'], 'd lapsed, kept: 3 − 2 may run')
  t.equal(await f.admitted(a, [limit(4, 1_000)], 4), 3, 'under 4/1s: d\'s ⌊4/3⌋ = 1 held')
  t.equal(await f.admitted(a, [limit(4, HOUR_MS)], 4), 2, 'under 4/1h: ⌊4/2⌋ = 2, the release is in its window')
})

t.test('a release keeps the latest end of its size\'s holds', async (t) => {
  const f = await fleet(t)
  const late = Date.now() + HOUR_MS
  await f.admin.hset(`${PREFIX}released-floors`, '2', late)
  await cutOff(f, f.member('old', 2))
  await f.join(f.member('a', 2), f.member('b', 2))
  t.same(await f.lapsed(), [], 'old released')
  t.equal(await f.admin.hget(`${PREFIX}released-floors`, '2'), String(late), 'an earlier release ending later is kept')
})

t.test('records: a sidecar that left is dropped; one declaring no size never stays lapsed; none is read as 0', async (t) => {
  const f = await fleet(t)
  const a = f.member('a', 2)
  const big = f.member('big', 4)
  await f.join(a, big)
  await f.store.leave(big)
  await cutOff(f, f.member('x', 2))
  await f.join(f.member('b', 2))
  t.same(await f.lapsed(), [], 'x released by size 2: big\'s 4 left with it')
  t.same(await f.floors(), { a: '2', b: '2' })
  await f.store.leave(f.member('b', 2))
  // RATE_LIMIT_FLEET_SIZE unset: a sidecar cut off spends nothing alone, so nothing is kept for
  // it (one present of 2: another lapsed would be kept).
  await cutOff(f, f.member('unset', 0))
  await f.store.heartbeat(a, [])
  t.same(await f.lapsed(), [], 'a lapsed sidecar declaring no size is forgotten')
  t.same(await f.floors(), { a: '2' })
  const zero = f.member('zero', 0)
  await f.join(zero)
  t.equal(await f.admitted(zero, [limit(2, HOUR_MS)], 2), 1, 'x\'s release held by its 2 (⌊2/2⌋ = 1): a size of 0 on record divides nothing')
})

t.test('an earlier version\'s lapsed sidecar (no record) is held as the smallest size on record', async (t) => {
  const f = await fleet(t)
  const a = f.member('a', 4)
  const b = f.member('b', 2)
  await f.join(a, b)
  await f.admin.zadd(`${PREFIX}lapsed`, 1, 'legacy')
  // An earlier version's lapse of a sidecar that had declared 0 (it wrote a record, then lapsed unchecked).
  await f.admin.hset(`${PREFIX}floors`, 'legacy0', '0')
  await f.admin.zadd(`${PREFIX}lapsed`, 2, 'legacy0')
  t.equal(await f.admitted(a, [limit(4, HOUR_MS)], 4), 0, 'both held as ⌊4/2⌋ = 2 (4 − 2 may run: none released)')
  await f.join(f.member('c', 2), f.member('d', 2))
  t.same(await f.lapsed(), [], 'four present: both released')
  t.same(await f.admin.hgetall(`${PREFIX}released-floors`), {}, 'no size known for either')
  t.equal(await f.admitted(a, [limit(4, HOUR_MS)], 4), 0, 'their holds a window more: ⌊4/2⌋ each')
})

t.test('a sidecar declaring no size releases by the sizes on record', async (t) => {
  const f = await fleet(t)
  await f.join(f.member('a', 2))
  await cutOff(f, f.member('x', 2))
  await f.join(f.member('b', 0), f.member('c', 0))
  t.same(await f.lapsed(), [], 'three present, 2 declared: x released by c\'s presence')
})

t.test('a restart declaring another size: its earlier run\'s entry is held by the size that run declared', async (t) => {
  const f = await fleet(t)
  const a = f.member('a', 3)
  await f.join(a, f.member('b', 3))
  const r = f.member('r', 2)
  await cutOff(f, r)
  await f.store.heartbeat(a, [])
  t.same(await f.lapsed(), ['r'])
  r.fleetFloor = 3
  r.presenceTtlMs = 60_000
  await f.store.reassert(r, [], 'e', true)
  t.same(await f.lapsed(), [], 'a new run: its lapse entry released')
  t.equal(await f.admitted(a, [limit(4, HOUR_MS)], 4), 2, 'held ⌊4/2⌋ = 2, as the earlier run may have spent')
})

t.test('the RateLimit fields count as the next take: the caller\'s own size, expiries, releases by the largest', async (t) => {
  const f = await fleet(t)
  const a = f.member('a', 3)
  await f.join(a, f.member('b', 3))
  await cutOff(f, f.member('x', 3))
  await f.store.heartbeat(a, [])
  // n, not yet on record, declares 2: its take will hold ⌊4/2⌋ = 2 for x (then released).
  const n = f.member('n', 2)
  const lim = [limit(4, HOUR_MS)]
  const [own] = await f.store.peek(a.epoch, 2, 'GET /r', lim) ?? []
  t.equal(own?.left, 2, 'n\'s own size counted before it is on record')
  t.equal(await f.admitted(n, lim, 4), 2, 'as its take')
  // A member declaring no size expired since the last presence: not lapsed for the next take.
  const one = f.member('one', 1)
  const g = await fleet(t)
  await g.join(one)
  await cutOff(g, g.member('unset', 0))
  const [fields] = await g.store.peek(one.epoch, 1, 'GET /r', [limit(2, HOUR_MS)]) ?? []
  t.equal(fields?.left, 2, 'nothing held for it')
  t.equal(await g.admitted(one, [limit(2, HOUR_MS)], 2), 2)
})

t.test('the RateLimit fields foresee no release the largest size on record forbids', async (t) => {
  // a (2) and b (4) present, x and y (2) lapsed: by b's size both may run, none is released,
  // and with no room (⌊2/2⌋ each) the reset is a window, not a release's end.
  const f = await fleet(t)
  const a = f.member('a', 2)
  await f.join(a, f.member('b', 4))
  await cutOff(f, f.member('x', 2))
  await cutOff(f, f.member('y', 2))
  const [fields] = await f.store.peek(a.epoch, 2, 'GET /r', [limit(2, HOUR_MS)]) ?? []
  t.equal(fields?.left, 0)
  t.equal(fields?.resetMs, HOUR_MS)
  await f.store.heartbeat(a, [])
  t.same(await f.lapsed(), ['x', 'y'])
})

t.test('an earlier version beside this one reads the keys it knows as it wrote them; the held sizes are a key of their own', async (t) => {
  // Earlier versions read members, lapsed and released (sorted sets of names scored by time)
  // and, from the records on, floors (name → size) and released-floors (size → time).
  const f = await fleet(t)
  const a = f.member('a', 4)
  await f.join(a, f.member('b', 4))
  await cutOff(f, f.member('x', 3))
  await cutOff(f, f.member('y', 4))
  await f.store.heartbeat(a, [])
  t.same(await f.lapsed(), ['x', 'y'], 'two present of 4: both may run')
  // y's pod restarts keeping its id: its entry stays lapsed, renamed; present 3: x released.
  await f.store.reassert(f.member('y', 4), [], 'e', true)
  const types = await Promise.all(['members', 'lapsed', 'released', 'floors', 'released-floors', 'held-sizes'].map(async (k) => await f.admin.type(`${PREFIX}${k}`)))
  t.same(types, ['zset', 'zset', 'zset', 'hash', 'hash', 'hash'])
  const [entry] = await f.lapsed()
  t.match(entry, /^y#\d+$/, 'the earlier run\'s entry: a lapsed name like any other')
  t.same(await f.floors(), { a: '4', b: '4', y: '4', [entry ?? '']: '4' }, 'each record a size, the renamed entry\'s too')
  t.match(await f.admin.zrange(`${PREFIX}released`, '0', '-1'), [/^x@\d+$/])
  t.same(await f.admin.hgetall(`${PREFIX}held-sizes`), { lo: '3', hi: '3' }, 'x\'s size, held while y\'s entry may stand for it')
})
