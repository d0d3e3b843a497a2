import t from 'tap'
import fc from 'fast-check'
import { createLedger } from '../../src/quota/ledger.js'
import { parseLimit, type Limit } from '../../src/config/rate-limit-rules.js'
import { createCooldowns, createLocalStore, createSendIds } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'

const limit = (text: string): Limit => {
  const parsed = parseLimit(text)
  if (typeof parsed === 'string') throw new Error(parsed)
  return parsed
}

t.test('sliding windows: N sends in any W, whatever the alignment (a fixed window would allow 2N across its edge)', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const twoPerSecond = [limit('2/1s')]
  t.equal(ledger.wait('r', twoPerSecond), 0)
  ledger.record('r', twoPerSecond, 'a')
  await c.tick(900)
  ledger.record('r', twoPerSecond, 'b')
  t.equal(ledger.wait('r', twoPerSecond), 100, 'the first send leaves the window 1 s after it went')
  await c.tick(100)
  t.equal(ledger.wait('r', twoPerSecond), 0, 'exactly W after a send, it no longer counts')
  ledger.record('r', twoPerSecond, 'c')
  t.equal(ledger.wait('r', twoPerSecond), 900, 'the second send (at 900 ms) must leave: a fixed window from 1000 ms would have allowed one more')
  t.equal(ledger.used('r', twoPerSecond[0] as Limit), 2)
})

t.test('every limit of a rule must have room; the wait is the longest', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('5/1s'), limit('6/1m')]
  for (let i = 0; i < 6; i++) {
    t.equal(ledger.wait('r', limits), 0)
    ledger.record('r', limits, `s${i}`)
    await c.tick(300)
  }
  t.equal(ledger.wait('r', limits), 60_000 - 6 * 300, 'the minute limit holds although the second one has room')
  t.equal(ledger.wait('other', limits), 0, 'scopes are separate')
})

t.test('capacity: a share of each limit; 0 means never (Infinity)', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('4/10s')]
  const half = (l: Limit): number => Math.floor(l.count / 2)
  ledger.record('r', limits, 'a')
  t.equal(ledger.wait('r', limits, half), 0)
  await c.tick(1000)
  ledger.record('r', limits, 'b')
  t.equal(ledger.wait('r', limits, half), 9000, 'two of a share of two: the oldest must leave')
  t.equal(ledger.wait('r', limits), 0, 'the full limit still has room')
  t.equal(ledger.wait('r', limits, () => 0), Infinity)
})

t.test('a refund forgets exactly that send, under every limit', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('1/1h'), limit('3/1d')]
  ledger.record('r', limits, 'sent')
  t.equal(ledger.wait('r', limits), 3_600_000)
  ledger.refund('r', limits, 'other')
  t.equal(ledger.wait('r', limits), 3_600_000, 'another id refunds nothing')
  ledger.refund('r', limits, 'sent')
  t.equal(ledger.wait('r', limits), 0)
  t.same(ledger.open(), [])
})

t.test('open: every send still in a window, with its age, for telling Redis again', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('10/1s'), limit('10/5s')]
  ledger.record('r', limits, 'old')
  await c.tick(2000)
  ledger.record('r', limits, 'new')
  await c.tick(500)
  t.same(ledger.open().map((s) => [s.limit.text, s.id, s.ageMs]), [['10/1s', 'new', 500], ['10/5s', 'old', 2500], ['10/5s', 'new', 500]])
})

t.test('property: the ledger admits at most N in any interval of length W (sliding), for any arrival schedule', async () => {
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 1, max: 5 }), fc.integer({ min: 10, max: 1000 }), fc.array(fc.integer({ min: 0, max: 400 }), { minLength: 1, maxLength: 60 }),
    async (count, windowMs, gaps) => {
      const c = fakeClock()
      const ledger = createLedger(c.clock)
      const limits = [{ count, windowMs, text: `${count}/${windowMs}ms` }]
      const admitted: number[] = []
      const nextId = createSendIds('m')
      for (const gap of gaps) {
        await c.tick(gap)
        if (ledger.wait('r', limits) === 0) {
          ledger.record('r', limits, nextId())
          admitted.push(c.clock.now())
        }
      }
      for (let i = 0; i + count < admitted.length; i++) {
        // The send count places after this one must be at least W later.
        if ((admitted[i + count] ?? 0) - (admitted[i] ?? 0) < windowMs) return false
      }
      // Liveness: after a full window of silence there is room again.
      await c.tick(windowMs)
      return ledger.wait('r', limits) === 0
    }), { numRuns: 200 })
})

t.test('the local store: cool-down first, then the budget; a refund gives the point back', async (t) => {
  const c = fakeClock()
  const cooldowns = createCooldowns(c.clock)
  const store = createLocalStore(c.clock, cooldowns)
  const limits = [limit('1/1m')]
  const first = store.take('r', limits)
  t.equal(first instanceof Promise ? 'promise' : first.kind, 'ok')
  t.match(store.take('r', limits), { kind: 'budget', ms: 60_000 })
  if (!(first instanceof Promise) && first.kind === 'ok') store.refund('r', limits, first.id)
  t.match(store.take('r', limits), { kind: 'ok' }, 'the refunded point is there again')
  t.equal(store.coolDown('r', { retryAfterMs: 5000, baseMs: 1000, maxMs: 10_000 }), 5000)
  t.match(store.take('r', limits), { kind: 'cooldown', ms: 5000 }, 'a cool-down stands before any budget')
  t.match(store.take('free', []), { kind: 'ok', id: '' }, 'no limits: nothing to take')
})

t.test('cool-downs: adopted ones never shorten a longer one; the backoff doubles within its own length', async (t) => {
  const c = fakeClock()
  const cooldowns = createCooldowns(c.clock)
  const request = { retryAfterMs: undefined, baseMs: 1000, maxMs: 8000 }
  t.equal(cooldowns.start('r', request), 1000)
  t.equal(cooldowns.adopt('r', 500), false, 'a shorter one learned elsewhere changes nothing')
  t.equal(cooldowns.left('r'), 1000)
  t.equal(cooldowns.adopt('r', 3000), true)
  t.equal(cooldowns.left('r'), 3000)
  await c.tick(3000)
  t.equal(cooldowns.left('r'), 0)
  t.same(cooldowns.active(), [])
  t.equal(cooldowns.start('r', request), 6000, 'a repeat within the last length after it ended doubles it')
  t.equal(cooldowns.start('r', { ...request, retryAfterMs: 7000 }), 7000, 'a longer Retry-After lengthens the one under way')
  t.equal(cooldowns.start('r', { ...request, retryAfterMs: 2000 }), 7000 - 0, 'a shorter one does not shorten it')
  t.equal(cooldowns.adopt('x', 0), false)
})
