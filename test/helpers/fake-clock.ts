import FakeTimers from '@sinonjs/fake-timers'
import type { Clock } from '../../src/clock.js'

/** Where the fake monotonic clock starts: far from any wall time, so mixing the two up shows. */
const MONOTONIC_ORIGIN = 12_345

/**
 * A Clock over a sinon fake clock: tests move time with tickAsync, never by sleeping.
 * The monotonic and wall readings can also be moved independently:
 * - `stepWall(ms)`: the wall clock is stepped (NTP, an operator), forward or back;
 *   monotonic time and timers are unaffected;
 * - `suspend(ms)`: the VM or process is suspended: the wall clock moves on, the
 *   monotonic clock (Linux CLOCK_MONOTONIC) and therefore the timers stand still;
 * - `block(ms)`: the event loop is blocked: both clocks move on and no timer fires;
 *   the function it returns ends the block, and the timers that fell due meanwhile
 *   then fire, late, once each (sinon's `jump`);
 * - `reboot()`: the node is rebooted: `sinceBoot` tells another boot (the monotonic reading,
 *   shared by the runs of one boot as Linux's CLOCK_MONOTONIC is, goes on: another boot's means nothing).
 */
export function fakeClock (start = 1_700_000_000_000) {
  const fake = FakeTimers.createClock(start)
  let monotonicSkew = MONOTONIC_ORIGIN - start
  let wallSkew = 0
  let boot = 1
  const clock: Clock = {
    now: () => fake.now + monotonicSkew,
    wallNow: () => fake.now + wallSkew,
    setTimer (fn, ms) {
      const id = fake.setTimeout(fn, ms)
      return () => { fake.clearTimeout(id) }
    },
    sinceBoot: () => ({ boot: `boot-${boot}`, ms: clock.now() })
  }
  return {
    clock,
    fake,
    tick: (ms: number) => fake.tickAsync(ms),
    stepWall: (ms: number) => { wallSkew += ms },
    reboot: () => { boot++ },
    suspend: (ms: number) => { wallSkew += ms },
    block: (ms: number) => {
      monotonicSkew += ms
      wallSkew += ms
      return () => {
        monotonicSkew -= ms
        wallSkew -= ms
        fake.jump(ms)
      }
    }
  }
}
