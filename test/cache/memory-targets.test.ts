// The memory store's list of target URIs (what a write's invalidation drops by) stays the
// targets of the copies it holds, through any mix of stores, replacements, evictions, lapses
// and drops: it is bounded with the copies, and a drop finds each copy of its target.
import t from 'tap'
import fc from 'fast-check'
import { createMemoryStore, entrySize } from '../../src/cache/entries.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { entry } from './entry.js'

const IDS = ['a', 'b', 'c', 'd', 'e']
const URIS = ['A', 'B', 'C']

type Step =
  | { do: 'set', id: string, uri: string, bytes: number }
  | { do: 'get', id: string }
  | { do: 'drop', uri: string }
  | { do: 'wait', ms: number }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ do: fc.constant('set' as const), id: fc.constantFrom(...IDS), uri: fc.constantFrom(...URIS), bytes: fc.integer({ min: 0, max: 600 }) }),
  fc.record({ do: fc.constant('get' as const), id: fc.constantFrom(...IDS) }),
  fc.record({ do: fc.constant('drop' as const), uri: fc.constantFrom(...URIS) }),
  fc.record({ do: fc.constant('wait' as const), ms: fc.integer({ min: 0, max: 1_000 }) })
)

t.test('the targets listed are those of the copies held, after every step', async (t) => {
  // Room for about three small copies: stores evict, and entries lapse 1.5 s after they are stored.
  const maxBytes = 3 * entrySize(entry({ body: Buffer.alloc(300) }))
  await fc.assert(fc.asyncProperty(fc.array(step, { maxLength: 40 }), async (steps) => {
    const c = fakeClock()
    const store = createMemoryStore({ clock: c.clock, maxBytes, onEvict: () => {} })
    for (const s of steps) {
      const held = store.entries()
      if (s.do === 'set') store.set(s.id, entry({ uri: s.uri, body: Buffer.alloc(s.bytes), storedAt: c.clock.now() }))
      else if (s.do === 'get') store.get(s.id)
      else if (s.do === 'drop') {
        const dropped = store.drop(s.uri)
        if (dropped !== held.filter((e) => e.uri === s.uri).length) throw new Error(`drop ${s.uri}: ${dropped} dropped`)
      } else await c.tick(s.ms)
      const targets = new Set(store.entries().map((e) => e.uri)).size
      if (store.targets() !== targets) throw new Error(`after ${JSON.stringify(s)}: ${store.targets()} targets listed, ${targets} held`)
    }
  }), { numRuns: 300 })
})

t.test('one copy stored and evicted, one lapsed, one dropped: no target is left listed', async (t) => {
  const c = fakeClock()
  const one = entry({ body: Buffer.alloc(300), storedAt: c.clock.now() })
  const store = createMemoryStore({ clock: c.clock, maxBytes: entrySize(one), onEvict: () => {} })
  store.set('a', { ...one, uri: 'A' })
  store.set('b', { ...one, uri: 'B' })
  t.equal(store.targets(), 1, 'a evicted for b: A is no target any more')
  await c.tick(1_500)
  t.equal(store.get('b'), undefined, 'b lapsed')
  t.equal(store.targets(), 0)
  store.set('c', { ...one, uri: 'C', storedAt: c.clock.now() })
  t.equal(store.drop('C'), 1)
  t.equal(store.targets(), 0)
})
