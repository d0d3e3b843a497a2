import FakeTimers from '@sinonjs/fake-timers'
import type { Clock } from '../../src/clock.js'

/** A Clock over a sinon fake clock: tests move time with tickAsync, never by sleeping. */
export function fakeClock (start = 1_700_000_000_000) {
  const fake = FakeTimers.createClock(start)
  const clock: Clock = {
    now: () => fake.now,
    setTimer (fn, ms) {
      const id = fake.setTimeout(fn, ms)
      return () => { fake.clearTimeout(id) }
    }
  }
  return { clock, fake, tick: (ms: number) => fake.tickAsync(ms) }
}
