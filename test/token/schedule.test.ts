import t from 'tap'
import { BACKOFF_MAX_MS, backoffDelay, tokenTimes } from '../../src/token/schedule.js'

const HOUR = 3_600_000

t.test('a 60-minute token: refreshed 5 to 7.5 minutes early, sent until 1 s before expiry', async (t) => {
  const early = tokenTimes(0, HOUR, 300_000, 0)
  const late = tokenTimes(0, HOUR, 300_000, 0.999999)
  t.equal(early.expiresAt, HOUR)
  t.equal(early.usableUntil, HOUR - 1000)
  t.equal(early.refreshAt, HOUR - 300_000)
  t.ok(late.refreshAt > HOUR - 450_000 && late.refreshAt < early.refreshAt)
})

t.test('the margin adapts to short lifetimes', async (t) => {
  const cases: Array<[number, number, number]> = [
    // lifetime, refreshAt (random = 0), usableUntil
    [4000, 3600, 3920],
    [60_000, 54_000, 59_000],
    [10 * 60_000, 540_000, 599_000]
  ]
  for (const [lifetime, refreshAt, usableUntil] of cases) {
    const times = tokenTimes(0, lifetime, 300_000, 0)
    t.equal(times.refreshAt, refreshAt, `refreshAt for ${lifetime}`)
    t.equal(times.usableUntil, usableUntil, `usableUntil for ${lifetime}`)
    t.ok(times.refreshAt < times.usableUntil, 'refresh always before the token stops being sent')
  }
})

t.test('jitter stays within half the margin, and spreads', async (t) => {
  const seen = new Set<number>()
  for (let i = 0; i <= 100; i++) {
    const r = i / 100
    const { refreshAt } = tokenTimes(0, HOUR, 300_000, r)
    t.ok(refreshAt <= HOUR - 300_000 && refreshAt >= HOUR - 450_000, `random ${r}`)
    seen.add(Math.round(refreshAt / 1000))
  }
  t.ok(seen.size > 50, 'pods with different random draws refresh in different seconds')
})

t.test('a zero margin still refreshes before the token stops being sent', async (t) => {
  const times = tokenTimes(1000, 4000, 0, 0.5)
  t.equal(times.refreshAt, times.usableUntil)
})

t.test('backoff: exponential ceiling, full jitter, capped', async (t) => {
  t.equal(backoffDelay(1, 1), 500)
  t.equal(backoffDelay(2, 1), 1000)
  t.equal(backoffDelay(5, 1), 8000)
  t.equal(backoffDelay(20, 1), BACKOFF_MAX_MS)
  t.equal(backoffDelay(20, 0.5), BACKOFF_MAX_MS / 2)
  t.equal(backoffDelay(3, 0), 1, 'never zero: no hot loop')
})
