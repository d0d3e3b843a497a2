// What a busy machine took from the models' sidecars, so that a model excuses a late answer
// only for a stall it saw, and saw where it happened. The sidecars run in the test's own
// process: every hop of a sidecar's Redis command (sidecar, fault proxy, redis-server, proxy,
// sidecar) waits for this event loop, and one hop for redis-server. A loop busy or
// descheduled 30 ms at a time never shows one stall past a 100 ms timeout, yet three hops
// add up past it: so the witness sums what was taken over a command's own window instead of
// looking for one long stall. What it sums, an upper bound of what a hop can wait:
//   - this event loop: its time busy (eventLoopUtilization's active: anything readable waits
//     for the loop to come round) and its thread's time waiting to run (/proc/self/schedstat:
//     woken by a socket, not run for 8 ms); without /proc, how late a 10 ms timer fires;
//   - redis-server: its main thread's CPU time and run-queue wait (/proc/<pid>/schedstat);
//   - the kernel's ksoftirqd threads, likewise: on a loaded machine loopback packets are
//     delivered by them, and each waits its turn for a CPU (23 ms a wake-up on average at
//     load 19 here, 2026-12-02): latency in neither process's accounting.
// A sidecar that never sends a command, or refuses while healthy, is late with nothing taken.
import { readdirSync, readFileSync } from 'node:fs'
import type { Built } from './build.js'

const TICK_MS = 10
/** A timer's ordinary lateness (timers have 1 ms granularity): not counted as taken. */
const JITTER_MS = 2
const KEEP_MS = 120_000
/** A Redis command's own time on an idle machine (loopback hops and one script): never the machine's. */
const OWN_MS = 10

interface Slice { from: number, to: number, ms: number }

export interface StallWitness {
  /** Milliseconds the machine took from the sidecars' path within [from, to] (performance.now() times). */
  takenMs: (from: number, to: number) => number
  stop: () => void
}

/** CPU and run-queue ms of a process's main thread so far (`self`: this one's); undefined without /proc. */
function schedstat (pid: number | 'self'): { cpuMs: number, waitMs: number } | undefined {
  try {
    const [cpu, wait] = readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ').map(Number)
    return { cpuMs: (cpu ?? 0) / 1e6, waitMs: (wait ?? 0) / 1e6 }
  } catch {
    return undefined
  }
}

/** The kernel's softirq threads, where /proc shows them. */
function softirqThreads (): number[] {
  try {
    return readdirSync('/proc').filter((name) => /^\d+$/.test(name)).filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('ksoftirqd/')
      } catch {
        return false
      }
    }).map(Number)
  } catch {
    return []
  }
}

/**
 * Watches this event loop, the kernel's softirq threads (unless `softirq` is false: a test of
 * the loop's part alone) and the processes `pids()` names (redis-server) until stop().
 */
export function watchStalls (pids: () => Array<number | undefined>, { softirq = true } = {}): StallWitness {
  const kernel = softirq ? softirqThreads() : []
  const slices: Slice[] = []
  const seen = new Map<number, number>()
  let prev = performance.now()
  let waited = schedstat('self')?.waitMs ?? 0
  let active = performance.eventLoopUtilization().active
  let timer: NodeJS.Timeout | undefined
  const tick = (): void => {
    const now = performance.now()
    const waitMs = schedstat('self')?.waitMs ?? waited
    const activeMs = performance.eventLoopUtilization().active
    // A timer late for want of the loop is time already counted as busy or waiting.
    const late = Math.max(now - prev - TICK_MS - JITTER_MS, activeMs - active + waitMs - waited)
    waited = waitMs
    active = activeMs
    if (late > 0) slices.push({ from: prev, to: now, ms: Math.min(late, now - prev) })
    for (const pid of [...pids(), ...kernel]) {
      if (pid === undefined) continue
      const stat = schedstat(pid)
      if (stat === undefined) continue
      const ms = stat.cpuMs + stat.waitMs
      const before = seen.get(pid)
      seen.set(pid, ms)
      if (before !== undefined && ms > before) slices.push({ from: prev, to: now, ms: ms - before })
    }
    while ((slices[0]?.to ?? Infinity) < now - KEEP_MS) slices.shift()
    prev = now
    timer = setTimeout(tick, TICK_MS).unref()
  }
  timer = setTimeout(tick, TICK_MS).unref()
  return {
    takenMs: (from, to) => {
      // Slices end in the order they were pushed: skip to the first that ends after `from`.
      let lo = 0
      for (let hi = slices.length; lo < hi;) {
        const mid = (lo + hi) >> 1
        if ((slices[mid]?.to ?? Infinity) < from) lo = mid + 1
        else hi = mid
      }
      let sum = 0
      for (let i = lo; i < slices.length; i++) {
        const s = slices[i]
        if (s === undefined || s.from >= to + TICK_MS) break
        const overlap = Math.min(s.to, to) - Math.max(s.from, from)
        if (overlap > 0) sum += s.ms * Math.min(1, overlap / Math.max(s.to - s.from, 1e-3))
      }
      return sum
    },
    stop: () => { clearTimeout(timer) }
  }
}

/**
 * Whether the machine could have made a Redis command late (past `timeoutMs`) that was sent
 * within [from, to]: nearly a whole timeout taken in some window of that length there.
 */
export function redisLateByMachine (witness: StallWitness, from: number, to: number, timeoutMs: number): boolean {
  for (let at = from; at <= to; at += TICK_MS) {
    if (witness.takenMs(at, at + timeoutMs) >= timeoutMs - OWN_MS) return true
  }
  return false
}

/** A call answered past `boundMs` is the machine's when it took at least the excess from that very call. */
export function lateByMachine (witness: StallWitness, call: { startedAt: number, doneAt: number }, boundMs: number): { excused: boolean, takenMs: number } {
  const takenMs = witness.takenMs(call.startedAt, call.doneAt)
  return { excused: takenMs >= call.doneAt - call.startedAt - boundMs, takenMs }
}

/** A sidecar's fall back from shared budgets to deciding alone, as it logged it. */
export interface Fallback { at: number, reason: string }

/** A pino line's time (Date.now()) as a performance.now() time. */
const monotonic = (entry: Record<string, unknown>): number => Number(entry.time) - performance.timeOrigin

/** Each time the sidecar left shared budgets (Redis unreachable, too slow or refusing), with its reason. */
export function fallbacksOf (logs: Built['logs']): Fallback[] {
  return logs.entries()
    .filter((e) => typeof e.msg === 'string' && e.msg.startsWith('rate-limit redis unreachable, too slow or refusing'))
    .map((e) => ({ at: monotonic(e), reason: String(e.reason) }))
}

/** Each time the sidecar found Redis had lost its data (every budget gated for one window). */
export function dataLossesOf (logs: Built['logs']): number[] {
  return logs.entries().filter((e) => typeof e.msg === 'string' && e.msg.startsWith('rate-limit redis lost its data')).map(monotonic)
}

/**
 * Whether the machine made a sidecar's Redis command late (its fall back at `f.at`): nearly
 * the whole timeout taken in the command's window. ioredis's timer fires a timeout
 * after the send: that timeout is the window. A script run past its deadline may also have
 * lost time before the send: a deadline is written from the Redis clock read at the previous
 * reply, so a late delivery of that reply counts against the next command
 * (src/quota/redis-backend.ts); its window reaches back over the heartbeat before. Any other
 * reason (a closed connection, a refused password) is no stall.
 */
export function fallbackByMachine (witness: StallWitness, f: Fallback, { timeoutMs, heartbeatMs }: { timeoutMs: number, heartbeatMs: number }): { excused: boolean, takenMs: number } {
  const reachMs = /timed out/i.test(f.reason) ? timeoutMs + TICK_MS : /no answer within/i.test(f.reason) ? heartbeatMs + 2 * timeoutMs : undefined
  if (reachMs === undefined) return { excused: false, takenMs: 0 }
  const takenMs = witness.takenMs(f.at - reachMs, f.at)
  return { excused: takenMs >= timeoutMs - OWN_MS, takenMs }
}
