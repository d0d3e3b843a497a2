// One fetch per key: who leads, who waits, what the waiters get, and the bytes the flights may hold.
import { EventEmitter } from 'node:events'
import t from 'tap'
import { createFlights } from '../../src/cache/flights.js'
import type { Entry } from '../../src/cache/entries.js'

const entry = { display: '/a' } as unknown as Entry
const caller = (): EventEmitter & { once: (e: 'close', l: () => void) => EventEmitter } => new EventEmitter()

t.test('one leader per key; waiters get its outcome; a leaving waiter stops waiting, the others do not', async (t) => {
  const ended: string[] = []
  const flights = createFlights({ holdBudgetBytes: 100, onEnd: (id) => { ended.push(id) } })
  t.equal(flights.join('a', caller()), undefined, 'nothing to join yet')
  const flight = flights.lead('a')
  t.ok(flight)
  t.equal(flights.lead('a'), undefined, 'a second leader for the same key is refused')
  t.ok(flights.lead('b'), 'another key leads its own')
  const leaving = caller()
  t.equal(flight?.waiting(), 0)
  const w1 = flights.join('a', caller())
  const w2 = flights.join('a', leaving)
  t.equal(flight?.waiting(), 2)
  leaving.emit('close')
  t.equal(await w2, 'gone')
  t.equal(flight?.waiting(), 1, 'one that left no longer counts')
  t.equal(leaving.listenerCount('close'), 0)
  flight?.settle(entry, true)
  t.same(await w1, { entry, standsIn: true })
  t.same(ended, ['a'])
  flight?.settle(undefined)
  t.same(ended, ['a'], 'settled once')
  t.equal(flights.join('a', caller()), undefined, 'over: the next one leads')
  const again = flights.lead('a')
  const w3 = flights.join('a', caller())
  again?.settle(undefined, true)
  t.same(await w3, { entry: undefined, standsIn: false }, 'nothing stands in for nothing')
  const third = flights.lead('a')
  const w4 = flights.join('a', caller())
  third?.settle(entry)
  t.same(await w4, { entry, standsIn: false }, 'a new answer, by default')
})

t.test('a leader\'s own callback runs once, as its flight ends, settled or failed', async (t) => {
  const flights = createFlights({ holdBudgetBytes: 1, onEnd: () => {} })
  const ended: string[] = []
  const settled = flights.lead('a', () => { ended.push('a') })
  const failed = flights.lead('b', () => { ended.push('b') })
  t.same(ended, [], 'not before')
  settled?.settle(entry)
  failed?.fail({ error: new Error('TI failed') })
  t.same(ended, ['a', 'b'])
  settled?.fail({ error: new Error('late') })
  failed?.settle(undefined)
  t.same(ended, ['a', 'b'], 'once each')
})

t.test('the flights together hold at most their budget of bytes; settling gives it back', async (t) => {
  const flights = createFlights({ holdBudgetBytes: 100, onEnd: () => {} })
  const a = flights.lead('a')
  const b = flights.lead('b')
  t.ok(a?.reserve(60))
  t.notOk(b?.reserve(41), 'over the budget')
  t.ok(b?.reserve(40))
  a?.settle(undefined)
  t.notOk(a?.reserve(1), 'an ended flight reserves nothing')
  t.ok(flights.lead('c')?.reserve(60), 'a\'s bytes came back')
})

t.test('endAll: every waiter goes on by itself', async (t) => {
  const flights = createFlights({ holdBudgetBytes: 1, onEnd: () => {} })
  flights.lead('a')
  const w = flights.join('a', caller())
  flights.endAll()
  t.same(await w, { entry: undefined, standsIn: false })
  t.equal(flights.join('a', caller()), undefined)
})

t.test('a flight that ends after endAll leaves a later flight of its key be', async (t) => {
  const flights = createFlights({ holdBudgetBytes: 1, onEnd: () => {} })
  const before = flights.lead('a')
  flights.endAll()
  const after = flights.lead('a')
  const w = flights.join('a', caller())
  before?.settle(undefined)
  t.equal(flights.lead('a'), undefined, 'the later flight still leads its key')
  after?.settle(entry)
  t.same(await w, { entry, standsIn: false }, 'its waiter gets its answer')
})
