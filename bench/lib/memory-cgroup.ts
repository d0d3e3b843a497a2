// A memory cgroup of its own for one process of the benchmark: a child of this process's
// own memory cgroup, with a limit, its peak and usage read, its memory.stat sampled at
// the peak, and removed at the end. Needs root. cgroup v1 (`memory.limit_in_bytes`) is what
// these machines run; the v2 path (`memory.max`) follows the kernel's documentation and is
// untested here.
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

const ROOT = '/sys/fs/cgroup'

interface Files {
  limit: string
  swapLimit: string
  usage: string
  peak: string
  /** OOM and limit-hit counters, printed as they are. */
  events: string[]
}

const V1: Files = {
  limit: 'memory.limit_in_bytes',
  swapLimit: 'memory.memsw.limit_in_bytes',
  usage: 'memory.usage_in_bytes',
  peak: 'memory.max_usage_in_bytes',
  events: ['memory.failcnt', 'memory.oom_control']
}
const V2: Files = {
  limit: 'memory.max',
  swapLimit: 'memory.swap.max',
  usage: 'memory.current',
  peak: 'memory.peak',
  events: ['memory.events']
}

export interface MemoryCgroup {
  version: 1 | 2
  dir: string
  /** The file a process's pid is written to, to move it into the group. */
  procsFile: string
  usageBytes: () => number
  /** The peak since the last resetPeak (v2 before Linux 6.12: since the group was made). */
  peakBytes: () => number
  resetPeak: () => void
  stat: () => Record<string, number>
  events: () => string
  remove: () => void
}

/** The group this process is in, as /proc/self/cgroup names it: v1's `memory` line, else v2's `0::`. */
function ownGroup (): { version: 1 | 2, base: string } {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').split('\n')
  for (const line of lines) {
    const [, controllers, path] = line.split(':')
    if (controllers?.split(',').includes('memory') === true && path !== undefined) {
      return { version: 1, base: join(ROOT, 'memory', path) }
    }
  }
  const v2 = lines.find((line) => line.startsWith('0::'))
  if (v2 !== undefined) return { version: 2, base: join(ROOT, v2.slice(3)) }
  throw new Error('no memory cgroup in /proc/self/cgroup')
}

const readNumber = (file: string): number => Number(readFileSync(file, 'utf8').trim())

export function createMemoryCgroup (name: string, limitBytes: number): MemoryCgroup {
  const { version, base } = ownGroup()
  const files = version === 1 ? V1 : V2
  const dir = join(base, name)
  mkdirSync(dir)
  const file = (f: string): string => join(dir, f)
  writeFileSync(file(files.limit), String(limitBytes))
  // No swap: the limit is the memory the process has, as in a pod. v1's memsw counts
  // memory and swap together; v2's swap.max counts swap alone.
  if (existsSync(file(files.swapLimit))) writeFileSync(file(files.swapLimit), String(version === 1 ? limitBytes : 0))
  return {
    version,
    dir,
    procsFile: file('cgroup.procs'),
    usageBytes: () => readNumber(file(files.usage)),
    peakBytes: () => readNumber(file(files.peak)),
    resetPeak: () => {
      try { writeFileSync(file(files.peak), version === 1 ? '0' : 'reset') } catch {}
    },
    stat: () => Object.fromEntries(readFileSync(file('memory.stat'), 'utf8').trim().split('\n')
      .map((line) => line.split(' '))
      .map(([key, value]) => [key ?? '', Number(value)])),
    events: () => files.events
      .filter((f) => existsSync(file(f)))
      .map((f) => `${f}: ${readFileSync(file(f), 'utf8').trim().replaceAll('\n', ', ')}`)
      .join('; '),
    remove: () => {
      // A group can be removed once no process is left in it (the killed sidecar's pid
      // goes a moment after its exit event).
      for (let attempt = 0; attempt < 50; attempt++) {
        try { rmdirSync(dir); return } catch {}
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100)
      }
      process.stderr.write(`could not remove ${dir}\n`)
    }
  }
}

/** Peak usage and memory.stat at that peak, sampled every everyMs while a load runs. */
export function watchPeak (cgroup: MemoryCgroup, everyMs = 20): { stop: () => { peakSampled: number, statAtPeak: Record<string, number> } } {
  let peakSampled = 0
  let statAtPeak: Record<string, number> = {}
  let timer: NodeJS.Timeout | undefined
  const tick = (): void => {
    try {
      const usage = cgroup.usageBytes()
      if (usage > peakSampled) {
        peakSampled = usage
        statAtPeak = cgroup.stat()
      }
    } catch {}
    timer = setTimeout(tick, everyMs)
  }
  tick()
  return {
    stop: () => {
      clearTimeout(timer)
      return { peakSampled, statAtPeak }
    }
  }
}
