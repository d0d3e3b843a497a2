// What the kernel says about a process and the machine: CPU time from
// /proc/<pid>/stat (utime + stime, in clock ticks, every thread included),
// resident memory from /proc/<pid>/status, and per-core busy time from /proc/stat.
import { execFileSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { setPriority } from 'node:os'

/** Clock ticks per second, the unit of utime and stime (usually 100). */
export const CLK_TCK = ((): number => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100
  } catch {
    return 100
  }
})()

function statFields (pid: number): string[] | undefined {
  let text: string
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8')
  } catch {
    return undefined
  }
  // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
  return text.slice(text.lastIndexOf(')') + 2).split(' ')
}

/** utime + stime of one process in seconds, or undefined once it is gone. */
export function cpuSeconds (pid: number): number | undefined {
  const f = statFields(pid)
  // After ')': state is field 3, so utime (14) and stime (15) are at indexes 11 and 12.
  if (f === undefined) return undefined
  return (Number(f[11]) + Number(f[12])) / CLK_TCK
}

/** The pids of a process's direct children (nginx's worker under its master). */
export function childrenOf (pid: number): number[] {
  const out: number[] = []
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const f = statFields(Number(name))
    if (f !== undefined && Number(f[1]) === pid) out.push(Number(name))
  }
  return out
}

function statusKiB (pid: number, field: string): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m?.[1] === undefined ? undefined : Number(m[1])
  } catch {
    return undefined
  }
}

/** Resident set size in MiB. */
export function rssMiB (pid: number): number | undefined {
  const kib = statusKiB(pid, 'VmRSS')
  return kib === undefined ? undefined : kib / 1024
}

/**
 * Private (anonymous) resident memory in MiB: RssAnon, the heap, stacks and malloc arenas,
 * which no other process shares. The rest of RSS (RssFile, RssShmem) is mostly the node
 * binary's pages, shared by every process that maps the same file.
 */
export function rssAnonMiB (pid: number): number | undefined {
  const kib = statusKiB(pid, 'RssAnon')
  return kib === undefined ? undefined : kib / 1024
}

/** Peak resident set size (VmHWM) in MiB since start or the last resetPeakRss. */
export function peakRssMiB (pid: number): number | undefined {
  const kib = statusKiB(pid, 'VmHWM')
  return kib === undefined ? undefined : kib / 1024
}

/** Resets VmHWM to the current RSS (proc(5), clear_refs "5"); false where not permitted. */
export function resetPeakRss (pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5')
    return true
  } catch {
    return false
  }
}

/** Busy and total ticks of each core, from /proc/stat (user nice system idle iowait irq softirq steal). */
export function coreTicks (): Array<{ busy: number, total: number }> {
  return readFileSync('/proc/stat', 'utf8').split('\n').filter((l) => /^cpu\d+ /.test(l)).map((l) => {
    const v = l.trim().split(/\s+/).slice(1, 9).map(Number)
    const total = v.reduce((x, y) => x + y, 0)
    return { busy: total - (v[3] ?? 0) - (v[4] ?? 0), total }
  })
}

/** A process group whose CPU and memory are counted together (nginx: master and worker). */
export interface Watched {
  pids: () => number[]
}

export function cpuOf (w: Watched): number {
  return w.pids().reduce((sum, pid) => sum + (cpuSeconds(pid) ?? 0), 0)
}

export function rssOf (w: Watched): number {
  return w.pids().reduce((sum, pid) => sum + (rssMiB(pid) ?? 0), 0)
}

export function rssAnonOf (w: Watched): number {
  return w.pids().reduce((sum, pid) => sum + (rssAnonMiB(pid) ?? 0), 0)
}

export function peakRssOf (w: Watched): number {
  return w.pids().reduce((sum, pid) => sum + (peakRssMiB(pid) ?? 0), 0)
}

export function resetPeakRssOf (w: Watched): boolean {
  return w.pids().map(resetPeakRss).every(Boolean)
}

/**
 * Sets the nice value of every thread of a process (setpriority(2) applies to one
 * thread on Linux). Used to shield latency runs from other work on a shared machine.
 */
export function setPriorityAll (pid: number, priority: number): void {
  let tids: string[]
  try {
    tids = readdirSync(`/proc/${pid}/task`)
  } catch {
    return
  }
  for (const tid of tids) {
    try {
      setPriority(Number(tid), priority)
    } catch {
      // not permitted, or the thread is gone: the run goes on at normal priority
    }
  }
}
