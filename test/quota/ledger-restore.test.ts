// A ledger restored from STATE_DIR (ledger-file.ts): an earlier run's sends count again, in
// time order, and the fleet store re-asserts them under the kept member id, with send ids of
// this run's own. (End to end: test/budgets/.)
import t from 'tap'
import { createLedger } from '../../src/quota/ledger.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { scriptedFleet } from './fleet-double.js'

const rules = parseRules('GET /a 2/1s 3/1m', 'RATE_LIMITS').rules
const [second, minute] = rules[0]?.limits ?? []

t.test('restored sends count in time order, whatever order they come in', async (t) => {
  if (second === undefined || minute === undefined) throw new Error('two limits')
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const now = c.clock.now()
  ledger.restore('GET /a', second, 'late', now - 100)
  ledger.restore('GET /a', second, 'early', now - 900)
  t.same(ledger.open().map((s) => [s.id, s.ageMs]), [['early', 900], ['late', 100]])
  t.equal(ledger.wait('GET /a', [second]), 100, 'the earlier one leaves the window first')
  t.equal(ledger.used('GET /a', second), 2)
  t.equal(ledger.used('GET /a', minute), 0, 'another limit is its own')
  ledger.restore('GET /a', minute, 'm', now)
  t.equal(ledger.used('GET /a', minute), 1)
  await c.tick(100)
  t.equal(ledger.used('GET /a', second), 1)
})

t.test('the fleet store re-asserts a restored ledger under the kept member id, new sends with ids of their own', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  if (second === undefined) throw new Error('a limit')
  ledger.restore('GET /a', second, 'kept:0', c.clock.now())
  const reasserted: string[] = []
  const f = await scriptedFleet(t, 'GET /a 2/1s 3/1m', {
    ledger,
    memberId: 'kept',
    before: (s) => { s.onReassert = (member, sends) => { reasserted.push(member, ...sends) } }
  })
  t.same(reasserted, ['kept', 'kept:0'], 'the earlier run\'s send told to Redis, as the same member')
  const take = await f.take()
  t.match(take, { kind: 'ok', id: /^[0-9a-f-]{13}:0$/ })
  t.not((take as { id: string }).id.startsWith('kept:'), 'a new send never reuses an earlier run\'s id')
  t.equal(ledger.used('GET /a', second), 2, 'the store records into the ledger it was given')
})
