// The bounded wait for a token request in flight, shared by every caller that comes meanwhile.
import t from 'tap'
import { createSharedWait } from '../../src/token/shared-wait.js'
import { fakeClock } from '../helpers/fake-clock.js'

t.test('one wait for all: a caller who comes later is released with the first, not waitMs after itself', async (t) => {
  const clock = fakeClock()
  const wait = createSharedWait(clock.clock, 2000)
  const hanging = new Promise<void>(() => {})
  const released: string[] = []
  void wait(hanging).then(() => { released.push('first') })
  await clock.tick(1500)
  void wait(hanging).then(() => { released.push('later') })
  await clock.tick(499)
  t.same(released, [])
  await clock.tick(1)
  t.same(released, ['first', 'later'], 'both at 2 s')
  t.equal(clock.fake.countTimers(), 0, 'one timer served both')
  void wait(hanging).then(() => { released.push('next') })
  await clock.tick(1999)
  t.same(released, ['first', 'later'], 'once it ended, the next caller waits afresh')
  await clock.tick(1)
  t.same(released, ['first', 'later', 'next'])
})

t.test('a request that ends releases its callers at once and leaves no timer behind', async (t) => {
  const clock = fakeClock()
  const wait = createSharedWait(clock.clock, 2000)
  let end = (): void => {}
  const running = new Promise<void>((resolve) => { end = resolve })
  const startedAt = clock.fake.now
  const waiting = wait(running)
  t.equal(clock.fake.countTimers(), 1)
  end()
  await waiting
  t.equal(clock.fake.now, startedAt, 'no time passed')
  t.equal(clock.fake.countTimers(), 0, 'the wait\'s timer was cancelled')
})
