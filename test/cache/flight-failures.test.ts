// A flight that fails ends for all its waiters at once with its failure (where the features meet, case 5):
// none of them fetches again after it, one after another.
import { EventEmitter } from 'node:events'
import t from 'tap'
import { createFlights, type Failure } from '../../src/cache/flights.js'
import type { Entry } from '../../src/cache/entries.js'

const caller = (): EventEmitter & { once: (e: 'close', l: () => void) => EventEmitter } => new EventEmitter()

t.test('fail: every waiter gets the failure, once; the flight ends and its bytes come back', async (t) => {
  const ended: string[] = []
  const flights = createFlights({ holdBudgetBytes: 10, onEnd: (id) => { ended.push(id) } })
  const flight = flights.lead('a')
  t.ok(flight?.reserve(10))
  const waiters = [flights.join('a', caller()), flights.join('a', caller()), flights.join('a', caller())]
  const failure: Failure = { answer: { statusCode: 404, headers: {}, body: Buffer.from('no') } }
  flight?.fail(failure)
  for (const w of waiters) t.same(await w, { entry: undefined, standsIn: false, failure })
  t.same(ended, ['a'])
  flight?.fail({ error: new Error('later') })
  flight?.settle(undefined)
  t.same(ended, ['a'], 'ended once')
  t.equal(flights.join('a', caller()), undefined, 'over: the next request leads')
  t.ok(flights.lead('b')?.reserve(10), 'the failed flight\'s bytes came back')
})

t.test('a settled flight cannot fail afterwards', async (t) => {
  const flights = createFlights({ holdBudgetBytes: 1, onEnd: () => {} })
  const flight = flights.lead('a')
  const w = flights.join('a', caller())
  flight?.settle(undefined)
  flight?.fail({ error: new Error('late') })
  t.same(await w, { entry: undefined, standsIn: false })
})

t.test('a stored answer standing in for a failure carries the failure too (for the fleet\'s waiters without a copy)', async (t) => {
  const ended: unknown[] = []
  const flights = createFlights({ holdBudgetBytes: 1, onEnd: (_id, result) => { ended.push(result) } })
  const entry = { display: '/a' } as unknown as Entry
  const failure: Failure = { error: new Error('timeout') }
  const flight = flights.lead('a')
  const w = flights.join('a', caller())
  flight?.settle(entry, true, failure)
  t.same(await w, { entry, standsIn: true, failure })
  t.same(ended, [{ entry, standsIn: true, failure }], 'the end is told what the waiters got')
})
