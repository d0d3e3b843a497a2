import t from 'tap'
import fc from 'fast-check'
import { createLedger, PENDING_HOLD_MS, type Ledger } from '../../src/quota/ledger.js'
import { parseLimit, type Limit } from '../../src/config/rate-limit-rules.js'
import { createCooldowns, createLocalStore, createSendIds } from '../../src/quota/store.js'
import { ledgerBudget } from '../../src/quota/rate-limit-fields.js'
import { fakeClock } from '../helpers/fake-clock.js'

const limit = (text: string): Limit => {
  const parsed = parseLimit(text)
  if (typeof parsed === 'string') throw new Error(parsed)
  return parsed
}

/** A ledger on a fake clock. */
function fresh () {
  const c = fakeClock()
  return { c, ledger: createLedger(c.clock) }
}

/** A send admitted and written at once (the common path). */
function sendNow (ledger: Ledger, scope: string, limits: readonly Limit[], id: string): void {
  ledger.record(scope, limits, id)
  ledger.leave(scope, limits, id)
}

t.test('sliding windows: N sends in any W, whatever the alignment (a fixed window would allow 2N across its edge)', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const twoPerSecond = [limit('2/1s')]
  t.equal(ledger.wait('r', twoPerSecond), 0)
  sendNow(ledger, 'r', twoPerSecond, 'a')
  await c.tick(900)
  sendNow(ledger, 'r', twoPerSecond, 'b')
  t.equal(ledger.wait('r', twoPerSecond), 100, 'the first send leaves the window 1 s after it went')
  await c.tick(100)
  t.equal(ledger.wait('r', twoPerSecond), 0, 'exactly W after a send, it no longer counts')
  sendNow(ledger, 'r', twoPerSecond, 'c')
  t.equal(ledger.wait('r', twoPerSecond), 900, 'the second send (at 900 ms) must leave: a fixed window from 1000 ms would have allowed one more')
  t.equal(ledger.used('r', twoPerSecond[0] as Limit), 2)
})

t.test('every limit of a rule must have room; the wait is the longest', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('5/1s'), limit('6/1m')]
  for (let i = 0; i < 6; i++) {
    t.equal(ledger.wait('r', limits), 0)
    sendNow(ledger, 'r', limits, `s${i}`)
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
  sendNow(ledger, 'r', limits, 'a')
  t.equal(ledger.wait('r', limits, half), 0)
  await c.tick(1000)
  sendNow(ledger, 'r', limits, 'b')
  t.equal(ledger.wait('r', limits, half), 9000, 'two of a share of two: the oldest must leave')
  t.equal(ledger.wait('r', limits), 0, 'the full limit still has room')
  t.equal(ledger.wait('r', limits, () => 0), Infinity)
})

t.test('a refund forgets exactly that send, under every limit', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [limit('1/1h'), limit('3/1d')]
  sendNow(ledger, 'r', limits, 'sent')
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
  sendNow(ledger, 'r', limits, 'old')
  await c.tick(2000)
  sendNow(ledger, 'r', limits, 'new')
  await c.tick(500)
  t.same(ledger.open().map((s) => [s.limit.text, s.id, s.ageMs]), [['10/1s', 'new', 500], ['10/5s', 'old', 2500], ['10/5s', 'new', 500]])
})

t.test('a send counts from when it leaves: waiting to leave, it counts as leaving now', async (t) => {
  const { c, ledger } = fresh()
  const limits = [limit('2/1s')]
  ledger.record('r', limits, 'a')
  ledger.record('r', limits, 'b')
  await c.tick(1_500)
  t.equal(ledger.wait('r', limits), 1_000, 'admitted a window ago, not left yet: a full window from now')
  t.equal(ledger.used('r', limits[0] as Limit), 2)
  t.same(ledger.open().map((s) => [s.id, s.ageMs]), [['a', 0], ['b', 0]], 'told Redis (or the file) as leaving now')
  t.equal(ledger.leave('r', limits, 'a'), 1_500, 'the ms it waited since its admission')
  await c.tick(400)
  t.equal(ledger.wait('r', limits), 600, 'a left 400 ms ago: the next place is free once it leaves the window; b, waiting, holds the other')
  t.equal(ledger.leave('r', limits, 'b'), 1_900)
  t.equal(ledger.wait('r', limits), 600)
  t.same(ledger.open().map((s) => [s.id, s.ageMs]), [['a', 400], ['b', 0]])
  t.equal(ledger.leave('r', limits, 'gone'), 0, 'a send the ledger does not hold: nothing')
  await c.tick(1_000)
  t.equal(ledger.wait('r', limits), 0)
  t.same(ledger.open(), [])
})

t.test('a send left before is timed again only later, and kept in order', async (t) => {
  const { c, ledger } = fresh()
  const limits = [limit('2/1s'), limit('3/10s')]
  sendNow(ledger, 'r', limits, 'a')
  await c.tick(300)
  sendNow(ledger, 'r', limits, 'b')
  await c.tick(300)
  t.equal(ledger.leave('r', limits, 'a'), 600, 'a second leave moves it later, under every limit')
  t.same(ledger.open().map((s) => [s.limit.text, s.id, s.ageMs]), [['2/1s', 'b', 300], ['2/1s', 'a', 0], ['3/10s', 'b', 300], ['3/10s', 'a', 0]])
  t.equal(ledger.wait('r', limits), 700, 'b, the oldest now, leaves the window first')
  ledger.restore('r', limits[0] as Limit, 'old', c.clock.now() - 100)
  t.same(ledger.open().filter((s) => s.limit.text === '2/1s').map((s) => s.id), ['b', 'old', 'a'], 'a restored send takes its place by time')
})

t.test('a send that never leaves nor comes back holds its point PENDING_HOLD_MS, then a window', async (t) => {
  const { c, ledger } = fresh()
  const limits = [limit('1/1s')]
  ledger.record('r', limits, 'lost')
  await c.tick(PENDING_HOLD_MS - 1)
  t.equal(ledger.wait('r', limits), 1_000)
  await c.tick(1)
  t.equal(ledger.wait('r', limits), 1_000, 'counted as having left at its admission plus the hold')
  await c.tick(999)
  t.equal(ledger.wait('r', limits), 1)
  await c.tick(1)
  t.equal(ledger.wait('r', limits), 0)
  t.equal(ledger.leave('r', limits, 'lost'), 0, 'gone from the ledger: nothing to time')
})

t.test('RateLimit fields from the ledger: a waiting send holds its place; its reset counts from when it left', async (t) => {
  const { c, ledger } = fresh()
  const limits = [limit('2/1s')]
  ledger.record('r', limits, 'a')
  await c.tick(1_500)
  t.same(ledgerBudget(ledger, 'r', limits, (l) => l.count), [{ left: 1, resetMs: 1_000 }], 'still waiting: a window from now')
  ledger.leave('r', limits, 'a')
  await c.tick(300)
  t.same(ledgerBudget(ledger, 'r', limits, (l) => l.count), [{ left: 1, resetMs: 700 }], 'left 300 ms ago, admitted 1800 ms ago')
})

t.test('a refund forgets a send whether it left or not', async (t) => {
  const { ledger } = fresh()
  const limits = [limit('2/1h')]
  ledger.record('r', limits, 'waiting')
  sendNow(ledger, 'r', limits, 'left')
  ledger.refund('r', limits, 'waiting')
  ledger.refund('r', limits, 'left')
  t.equal(ledger.wait('r', limits), 0)
  t.same(ledger.open(), [])
})

/** The most departures in any half-open interval [d, d + windowMs). */
function mostInWindow (departures: readonly number[], windowMs: number): number {
  return Math.max(0, ...departures.map((d) => departures.filter((e) => e >= d && e < d + windowMs).length))
}

t.test('property: at most N departures in any interval of length W, whatever the admissions and however long each waits to leave', async () => {
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 1, max: 5 }), fc.integer({ min: 10, max: 1000 }),
    // Each step: the time to the next arrival, and how long that send waits to leave if admitted
    // (0: at once; some longer than the window, as a queue for a connection may make it).
    fc.array(fc.tuple(fc.integer({ min: 0, max: 400 }), fc.integer({ min: 0, max: 3000 })), { minLength: 1, maxLength: 60 }),
    async (count, windowMs, steps) => {
      const c = fakeClock()
      const ledger = createLedger(c.clock)
      const limits = [{ count, windowMs, text: `${count}/${windowMs}ms` }]
      const departures: number[] = []
      const nextId = createSendIds('m')
      for (const [gap, delay] of steps) {
        await c.tick(gap)
        if (ledger.wait('r', limits) !== 0) continue
        const id = nextId()
        ledger.record('r', limits, id)
        c.fake.setTimeout(() => {
          ledger.leave('r', limits, id)
          departures.push(c.clock.now())
        }, delay)
      }
      await c.tick(3000)
      if (mostInWindow(departures, windowMs) > count) return false
      // Liveness: once every send left, a full window of silence leaves room again.
      await c.tick(windowMs)
      return ledger.wait('r', limits) === 0
    }), { numRuns: 300 })
})

t.test('counterexample (shrunk, 1/10ms): a send admitted at 0 that leaves at 10 must keep one admitted at 10 from leaving with it', async (t) => {
  const { c, ledger } = fresh()
  const limits = [{ count: 1, windowMs: 10, text: '1/10ms' }]
  ledger.record('r', limits, 'first')
  await c.tick(10)
  t.equal(ledger.wait('r', limits), 10, 'the first, still waiting, holds the window from now: the second waits')
  ledger.leave('r', limits, 'first')
  t.equal(ledger.wait('r', limits), 10, 'it left now: a window from now')
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

t.test('held past: once its hold ends, or once it left or was given back; never with no limits', async (t) => {
  const c = fakeClock()
  const ledger = createLedger(c.clock)
  const limits = [parseLimit('2/1s') as Limit, parseLimit('5/1m') as Limit]
  ledger.record('s', limits, 'a')
  ledger.record('s', limits, 'b')
  ledger.record('s', limits, 'c')
  t.notOk(ledger.heldPast('s', limits, 'a'))
  t.notOk(ledger.heldPast('s', [], 'a'), 'no limits: nothing to hold it')
  t.ok(ledger.heldPast('s', limits, 'x'), 'never admitted')
  ledger.leave('s', limits, 'a')
  t.ok(ledger.heldPast('s', limits, 'a'), 'left')
  ledger.refund('s', limits, 'b')
  t.ok(ledger.heldPast('s', limits, 'b'), 'given back')
  await c.tick(PENDING_HOLD_MS - 1)
  t.notOk(ledger.heldPast('s', limits, 'c'), 'within the hold')
  await c.tick(1)
  t.ok(ledger.heldPast('s', limits, 'c'), 'past the hold: it counts from the hold\'s end')
})
