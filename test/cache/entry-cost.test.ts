// What an entry is counted for in the memory store's bound (its measured cost, from its
// parts), that its body is memory of its own, and what the store gives back by itself: the
// copies past their lifetime, requests or none, and the least recently used when memory is
// short. An outside review found small entries counted at a third of their cost, a cache
// "full" at 32 MiB holding some 90 MiB of live memory, and lapsed copies kept while shedding.
import t from 'tap'
import { createMemoryStore, decodeEntry, encodeEntry, ENTRY_BYTES, entrySize, FIELD_BYTES, ownBytes, type Entry } from '../../src/cache/entries.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { entry } from './entry.js'

t.test('entrySize: ENTRY_BYTES, the body, the path, and each header field, list value and Vary digest with its characters', async (t) => {
  const bare = entry({ headers: {}, vary: [], body: Buffer.alloc(0), display: '' })
  const cases: Array<[string, Partial<Entry>, number]> = [
    ['nothing but the entry', {}, ENTRY_BYTES],
    ['a body of 1000 bytes', { body: Buffer.alloc(1000) }, ENTRY_BYTES + 1000],
    ['a path of 12 characters', { display: '/v2/store/ab' }, ENTRY_BYTES + 12],
    ['a header field', { headers: { 'content-type': 'application/json' } }, ENTRY_BYTES + FIELD_BYTES + 12 + 16],
    ['a list value: a field, and each value a field', { headers: { link: ['<a>', '<bc>'] } }, ENTRY_BYTES + FIELD_BYTES + 4 + FIELD_BYTES + 3 + FIELD_BYTES + 4],
    ['a Vary digest', { vary: [['x-tenant', 'abcdef']] }, ENTRY_BYTES + FIELD_BYTES + 8 + 6],
    ['the rule, the target digest and the status are no part of it', { rule: 'GET /a/very/long/rule/**', uri: 'u'.repeat(64), status: 203 }, ENTRY_BYTES]
  ]
  for (const [name, over, bytes] of cases) t.equal(entrySize({ ...bare, ...over }), bytes, name)
  t.equal(entrySize(entry()), ENTRY_BYTES + 7 + 2 + (FIELD_BYTES + 12 + 16) + (FIELD_BYTES + 7 + 2 * FIELD_BYTES + 2) + (FIELD_BYTES + 8 + 1), 'all parts add up')
})

t.test('entrySize is the measured cost: an entry of a 45-byte answer costs ~1.1 KB, not the ~400 B it was counted for', async (t) => {
  // The small answer of test/overload/cgroup-cache.test.ts: two header fields and a path of 29 characters.
  const small = entry({ headers: { 'content-type': 'application/json', date: 'Wed, 02 Dec 2026 13:29:21 GMT' }, vary: [], body: Buffer.alloc(45), display: '/v2/store/products/part-12345' })
  t.ok(entrySize(small) >= 1100, `counted ${entrySize(small)} B: no less than measured (docs/read-cache.md)`)
  t.ok(entrySize(small) <= 1300, `counted ${entrySize(small)} B: not far above it either`)
})

t.test('ownBytes: a slice (Node\'s pool, a Redis reply) is copied into memory of its own; a Buffer of its own is kept as it is', async (t) => {
  const pooled = Buffer.from('{"a":1}')
  t.ok(pooled.buffer.byteLength > pooled.length, 'a small Buffer is a slice of the pool')
  const own = ownBytes(pooled)
  t.not(own.buffer, pooled.buffer)
  t.equal(own.buffer.byteLength, pooled.length)
  t.same(own, pooled)
  const offset = Buffer.allocUnsafeSlow(16).subarray(4, 8)
  t.equal(ownBytes(offset).buffer.byteLength, 4, 'a slice at an offset is copied too')
  const whole = Buffer.allocUnsafeSlow(16)
  t.equal(ownBytes(whole), whole, 'the whole of its memory: the same Buffer')
  const head = Buffer.allocUnsafeSlow(16).subarray(0, 8)
  t.equal(ownBytes(head).buffer.byteLength, 8, 'the head of a larger memory: copied')
})

t.test('an entry read from Redis keeps its body, not the whole reply', async (t) => {
  const stored = entry({ body: Buffer.from('0123456789') })
  const decoded = decodeEntry(encodeEntry(stored, 1_000), 2_000, 5_000)
  if (typeof decoded === 'string') throw new Error(decoded)
  t.equal(decoded.body.toString(), '0123456789')
  t.equal(decoded.body.buffer.byteLength, 10)
})

t.test('purge: the copies past their lifetime (stale= included) go, requests or none; the usable stay', async (t) => {
  const c = fakeClock()
  const evicted: string[] = []
  const store = createMemoryStore({ clock: c.clock, maxBytes: 10 * ENTRY_BYTES, onEvict: (e) => { evicted.push(e.display) } })
  const at = c.clock.now()
  store.set('short', entry({ display: '/short', uri: 'S', freshMs: 1000, staleMs: 0, storedAt: at }))
  store.set('stale', entry({ display: '/stale', uri: 'T', freshMs: 1000, staleMs: 1000, storedAt: at }))
  store.set('long', entry({ display: '/long', uri: 'L', freshMs: 5000, staleMs: 0, storedAt: at }))
  const short = entrySize(entry({ display: '/short', uri: 'S' }))
  t.equal(store.purge(), 0, 'none lapsed yet')
  await c.tick(1000)
  t.equal(store.purge(), short, 'at its lifetime\'s end: the bytes it was counted for')
  t.same(store.entries().map((e) => e.display), ['/long', '/stale'], 'stale within stale=, and fresh, stay')
  await c.tick(999)
  t.equal(store.purge(), 0, 'stale= not yet over')
  await c.tick(1)
  t.ok(store.purge() > 0)
  t.same(store.entries().map((e) => e.display), ['/long'])
  t.equal(store.targets(), 1, 'their targets are forgotten too')
  t.same(evicted, [], 'a lapse is no eviction')
})

t.test('giveWay: the lapsed first, then the least recently used, until the bytes asked are given back', async (t) => {
  const c = fakeClock()
  const evicted: string[] = []
  const store = createMemoryStore({ clock: c.clock, maxBytes: 10 * ENTRY_BYTES, onEvict: (e) => { evicted.push(e.display) } })
  const one = (display: string, freshMs = 60_000): Entry => entry({ display, uri: display, freshMs, staleMs: 0, storedAt: c.clock.now() })
  for (const name of ['/a', '/b', '/c', '/d']) store.set(name, one(name))
  store.set('/lapsing', one('/lapsing', 10))
  store.get('/a')
  await c.tick(10)
  const size = entrySize(one('/a'))
  t.equal(store.giveWay(0), entrySize(one('/lapsing')), 'nothing asked: only the lapsed go')
  t.same(evicted, [])
  t.equal(store.giveWay(1), size, 'one byte: the least recently used entry, whole')
  t.same(evicted, ['/b'], '/a was used since: /b is the least recently used, an eviction')
  t.equal(store.giveWay(size + 1), 2 * size, 'more than one entry: two')
  t.same(evicted, ['/b', '/c', '/d'])
  t.equal(store.bytes(), size)
  t.equal(store.giveWay(100 * size), size, 'more than held: all it holds')
  t.equal(store.bytes(), 0)
  t.equal(store.giveWay(1), 0, 'empty: nothing')
})

t.test('startPurging twice arms one timer: stopPurging stops every purge', async (t) => {
  const c = fakeClock()
  const store = createMemoryStore({ clock: c.clock, maxBytes: 10 * ENTRY_BYTES, onEvict: () => {} })
  store.set('a', entry({ display: '/a', freshMs: 10, staleMs: 0, storedAt: c.clock.now() }))
  store.startPurging()
  store.startPurging()
  store.stopPurging()
  await c.tick(100)
  t.equal(store.entries().length, 1, 'lapsed, but no purge after stopPurging')
  store.startPurging()
  await c.tick(0)
  t.equal(store.entries().length, 0, 'started again: the lapsed copy goes at once')
})
