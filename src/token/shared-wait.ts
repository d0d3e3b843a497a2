// A bounded wait shared by every caller of the token manager while a token request runs.
import type { Clock } from '../clock.js'

/**
 * Waits for a request in flight, but never longer than waitMs. One wait is shared by
 * every caller that comes while it runs; once it ends, the next caller starts a new one.
 */
export function createSharedWait (clock: Clock, waitMs: number): (running: Promise<void>) => Promise<void> {
  let shared: Promise<void> | undefined
  return (running) => {
    if (shared === undefined) {
      let cancel = (): void => {}
      shared = new Promise<void>((resolve) => {
        cancel = clock.setTimer(resolve, waitMs)
        void running.then(resolve)
      }).finally(() => {
        cancel()
        shared = undefined
      })
    }
    return shared
  }
}
