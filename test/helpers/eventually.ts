import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'

/**
 * Waits for a state, not for a time: polls `check` until it holds and fails the test
 * with what it waited for when it does not within `timeoutMs`. Every test that waits
 * for the sidecar, an upstream or a metric goes through here, so a wait that never
 * ends says what it was waiting for instead of running into the file's timeout.
 * Resolves true when the state was reached.
 */
export async function eventually (t: Test, what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    if (await check()) return true
    if (performance.now() > deadline) break
    await sleep(10)
  }
  t.fail(`${what}: not within ${timeoutMs} ms`)
  return false
}
