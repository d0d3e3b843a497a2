/**
 * Time as the token logic sees it. Injected so that tests move time with a fake
 * clock instead of sleeping; the system clock's timers never keep the process alive.
 */
export interface Clock {
  now: () => number
  /** Runs fn once after ms; returns a function that cancels it. */
  setTimer: (fn: () => void, ms: number) => () => void
}

export const systemClock: Clock = {
  now: Date.now,
  setTimer (fn, ms) {
    const timer = setTimeout(fn, ms)
    timer.unref()
    return () => clearTimeout(timer)
  }
}
