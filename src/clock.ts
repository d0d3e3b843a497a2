import { performance } from 'node:perf_hooks'

/**
 * Time as the token logic sees it. Injected so that tests move time with a fake
 * clock instead of sleeping; the system clock's timers never keep the process alive.
 *
 * Two readings, because they answer different questions. `now()` is monotonic: it
 * never jumps when NTP or an operator steps the wall clock, so every lifetime and
 * delay is measured on it (timers are monotonic too). `wallNow()` is the wall
 * clock: it is for display (ISO times, the expiry gauge) and for one check only —
 * a token also lapses when the wall clock says so, because a suspended VM's
 * monotonic clock stands still while the gateway's time runs on (see token-manager.ts).
 */
export interface Clock {
  /** Monotonic milliseconds from an arbitrary origin (performance.now()). */
  now: () => number
  /** Wall-clock unix milliseconds (Date.now()). */
  wallNow: () => number
  /** Runs fn once after ms (monotonic); returns a function that cancels it. */
  setTimer: (fn: () => void, ms: number) => () => void
}

export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: Date.now,
  setTimer (fn, ms) {
    const timer = setTimeout(fn, ms)
    timer.unref()
    return () => clearTimeout(timer)
  }
}
