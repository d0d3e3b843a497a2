import { readFileSync } from 'node:fs'
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
  /**
   * The node's monotonic clock (Linux CLOCK_MONOTONIC: shared by every process, and so by a
   * container's next run, until the next boot) and which boot it counts from; undefined where
   * unknown. `now()` is per process: the STATE_DIR ledger dates its sends by this instead.
   */
  sinceBoot?: () => SinceBoot | undefined
}

export interface SinceBoot { boot: string, ms: number }

/** A file's content, or undefined where it cannot be read (not Linux, an older kernel). */
function readOrUndefined (path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return undefined
  }
}

/**
 * Which CLOCK_MONOTONIC a reading counts on: the kernel's id of this boot (a container sees its
 * node's) and, in a Linux time namespace that shifts it (a restored checkpoint), the shift
 * (`/proc/self/timens_offsets`, time_namespaces(7)): readings compare only under one key.
 */
export function bootKey (bootId: string | undefined, timensOffsets: string | undefined): string | undefined {
  const id = bootId?.trim()
  if (id === undefined || id === '') return undefined
  const shift = timensOffsets?.split('\n').find((line) => line.startsWith('monotonic'))?.trim().split(/\s+/).slice(1).join(' ')
  return shift === undefined || shift === '0 0' ? id : `${id}/${shift}`
}

let boot: string | undefined | null = null
export const systemClock: Clock = {
  now: () => performance.now(),
  wallNow: Date.now,
  setTimer (fn, ms) {
    const timer = setTimeout(fn, ms)
    timer.unref()
    return () => clearTimeout(timer)
  },
  sinceBoot () {
    if (boot === null) {
      boot = process.platform === 'linux'
        ? bootKey(readOrUndefined('/proc/sys/kernel/random/boot_id'), readOrUndefined('/proc/self/timens_offsets'))
        : undefined
    }
    // process.hrtime is libuv's CLOCK_MONOTONIC on Linux.
    return boot === undefined ? undefined : { boot, ms: Number(process.hrtime.bigint()) / 1e6 }
  }
}
