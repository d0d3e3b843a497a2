// The memory store's edges that the cost and purge tests leave unstated: a purge re-arms for
// the soonest lapse left, giveWay stops as soon as it has given what was asked, and a listing
// stops at its maximum.
import t from 'tap'
import { createMemoryStore, entrySize, lifetimeMs, PURGE_MS } from '../../src/cache/entries.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { entry } from './entry.js'

t.test('after a purge, the timer is armed for the soonest lapse left, not PURGE_MS on and on', async (t) => {
  const c = fakeClock()
  const store = createMemoryStore({ clock: c.clock, maxBytes: 1024 * 1024, onEvict: () => {} })
  store.startPurging()
  const at = c.clock.now()
  store.set('first', entry({ display: '/first', uri: 'F', freshMs: 10, staleMs: 0, storedAt: at }))
  // Lapses a third of the way between the second and the third PURGE_MS after the first purge.
  const later = entry({ display: '/later', uri: 'L', freshMs: 10 + Math.round(2.3 * PURGE_MS), staleMs: 0, storedAt: at })
  store.set('later', later)
  await c.tick(10)
  t.same(store.entries().map((e) => e.display), ['/later'], 'the first purge, at the first lapse')
  await c.tick(lifetimeMs(later) - 10 - 1)
  t.equal(store.count(), 1, 'not before its end')
  await c.tick(1)
  t.equal(store.count(), 0, 'at its end, by the timer armed after the first purge')
})

t.test('giveWay asked exactly an entry\'s bytes gives that entry, not one more', async (t) => {
  const c = fakeClock()
  const store = createMemoryStore({ clock: c.clock, maxBytes: 1024 * 1024, onEvict: () => {} })
  const one = (name: string) => entry({ display: name, uri: name, freshMs: 60_000, staleMs: 0, storedAt: c.clock.now() })
  for (const name of ['/a', '/b', '/c']) store.set(name, one(name))
  t.equal(store.giveWay(entrySize(one('/a'))), entrySize(one('/a')))
  t.same(store.entries().map((e) => e.display), ['/c', '/b'], 'only the least recently used went')
})

t.test('entries(max) lists the most recently used first, max of them; count() counts all', async (t) => {
  const c = fakeClock()
  const store = createMemoryStore({ clock: c.clock, maxBytes: 1024 * 1024, onEvict: () => {} })
  for (const name of ['/a', '/b', '/c', '/d']) store.set(name, entry({ display: name, uri: name, freshMs: 60_000, staleMs: 0, storedAt: c.clock.now() }))
  store.get('/a')
  t.same(store.entries(2).map((e) => e.display), ['/a', '/d'])
  t.same(store.entries(0), [])
  t.same(store.entries().map((e) => e.display), ['/a', '/d', '/c', '/b'], 'no max: all')
  t.equal(store.count(), 4)
})
