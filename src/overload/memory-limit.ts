// The memory limit the sidecar lives under: its container's, read from its own cgroup, or
// MEMORY_LIMIT_BYTES. Pure parsing over an injected file reader, so every layout (cgroup v1
// and v2, with or without a cgroup namespace) is tested from fixture contents.
import { readFileSync } from 'node:fs'

/** Reads a file's text, or undefined when it cannot be read (missing, no permission). */
export type ReadSystemFile = (path: string) => string | undefined

export const readSystemFile: ReadSystemFile = (path) => {
  try {
    return readFileSync(path, 'latin1')
  } catch {
    return undefined
  }
}

export const CGROUP_ROOT = '/sys/fs/cgroup'

/**
 * cgroup v1 writes "no limit" as the largest page-aligned counter (9223372036854771712 on
 * x86-64); any value this large (8 PiB) is taken to mean none.
 */
export const NO_LIMIT_FROM_BYTES = 2 ** 53

export type MemoryLimitSource = 'MEMORY_LIMIT_BYTES' | 'cgroup v2' | 'cgroup v1' | 'none'

export interface MemoryLimit {
  /** 0: no limit known; the memory half of the overload manager is off. */
  readonly bytes: number
  readonly source: MemoryLimitSource
  /** The control file the limit came from. */
  readonly file?: string
  /**
   * The same group's usage counter, the figure the kernel holds against the limit (v2
   * memory.current, v1 memory.usage_in_bytes); none for MEMORY_LIMIT_BYTES, which may name no
   * group at all (a cgroup's root counts the whole machine).
   */
  readonly usageFile?: string
  /** MEMORY_LIMIT_BYTES, when it was set above the cgroup's limit (`bytes`), which is taken instead. */
  readonly settingAbove?: number
}

/** The process's groups in /proc/self/cgroup: the v2 group (`0::/path`) and the v1 memory group. */
export function parseProcCgroup (text: string): { v2?: string, v1Memory?: string } {
  const groups: { v2?: string, v1Memory?: string } = {}
  for (const line of text.split('\n')) {
    // hierarchy-ID:controller-list:cgroup-path (the path may itself contain colons)
    const match = /^(\d+):([^:]*):(.*)$/.exec(line.trim())
    if (match === null) continue
    const [, id, controllers = '', path = ''] = match
    if (id === '0' && controllers === '') groups.v2 = path
    else if (controllers.split(',').includes('memory')) groups.v1Memory = path
  }
  return groups
}

/** A memory.max (v2) or memory.limit_in_bytes (v1) value in bytes; undefined for none ("max", huge) or unreadable. */
export function parseLimitValue (text: string | undefined): number | undefined {
  const value = text?.trim()
  if (value === undefined || value === '' || value === 'max' || !/^\d+$/.test(value)) return undefined
  const bytes = Number(value)
  return bytes > 0 && bytes < NO_LIMIT_FROM_BYTES ? bytes : undefined
}

/**
 * The group's directory and each of its ancestors, up to the mount's root: a limit set on a
 * parent (a pod's group) bounds its children too. Without a cgroup namespace, the path in
 * /proc/self/cgroup is the host's while the container sees its own group at the mount's root:
 * the root is always a candidate.
 */
export function candidateDirs (mount: string, group: string): string[] {
  const parts = group.split('/').filter((part) => part !== '' && part !== '.' && part !== '..')
  const dirs: string[] = []
  for (let n = parts.length; n >= 0; n--) dirs.push([mount, ...parts.slice(0, n)].join('/'))
  return dirs
}

/** The smallest limit among the candidates, with the file it came from and its group's usage counter. */
function smallestLimit (read: ReadSystemFile, dirs: string[], files: { limit: string, usage: string }, source: MemoryLimitSource): MemoryLimit | undefined {
  let found: MemoryLimit | undefined
  for (const dir of dirs) {
    const path = `${dir}/${files.limit}`
    const bytes = parseLimitValue(read(path))
    if (bytes !== undefined && (found === undefined || bytes < found.bytes)) found = { bytes, source, file: path, usageFile: `${dir}/${files.usage}` }
  }
  return found
}

/** A usage counter's value in bytes; undefined when unreadable. */
export function readUsageBytes (read: ReadSystemFile, file: string): number | undefined {
  const value = read(file)?.trim()
  return value !== undefined && /^\d+$/.test(value) ? Number(value) : undefined
}

/**
 * The process's private memory: its resident anonymous pages (RssAnon in /proc/self/status), in
 * bytes; undefined where the file or the field is missing (not Linux). What the kernel cannot
 * reclaim without swap, so what a memory limit's OOM kill is made of: V8's heap as committed,
 * malloc's heaps with their holes, thread stacks. Not the page cache (file pages, such as node's
 * own code, that the group may be charged for but the kernel reclaims before it kills).
 */
export function readPrivateBytes (read: ReadSystemFile = readSystemFile): number | undefined {
  const kib = /^RssAnon:\s+(\d+) kB$/m.exec(read('/proc/self/status') ?? '')?.[1]
  return kib === undefined ? undefined : Number(kib) * 1024
}

/** The limit of the process's own cgroup (v2 first, then v1), or none. */
export function cgroupMemoryLimit (read: ReadSystemFile = readSystemFile, root = CGROUP_ROOT): MemoryLimit {
  const groups = parseProcCgroup(read('/proc/self/cgroup') ?? '')
  const v2 = groups.v2 === undefined ? undefined : smallestLimit(read, candidateDirs(root, groups.v2), { limit: 'memory.max', usage: 'memory.current' }, 'cgroup v2')
  if (v2 !== undefined) return v2
  const v1 = groups.v1Memory === undefined
    ? undefined
    : smallestLimit(read, candidateDirs(`${root}/memory`, groups.v1Memory), { limit: 'memory.limit_in_bytes', usage: 'memory.usage_in_bytes' }, 'cgroup v1')
  return v1 ?? { bytes: 0, source: 'none' }
}

/**
 * MEMORY_LIMIT_BYTES when set (0: none, the manager's memory watch off), the cgroup's limit
 * otherwise, and the cgroup's when it is the smaller: the kernel kills at its own limit, so one
 * above it would shed too late and derive bounds (heads, the cache) from memory never granted.
 */
export function memoryLimit (setting: number | undefined, read: ReadSystemFile = readSystemFile): MemoryLimit {
  if (setting === undefined) return cgroupMemoryLimit(read)
  const own: MemoryLimit = { bytes: setting, source: 'MEMORY_LIMIT_BYTES' }
  if (setting === 0) return own
  const cgroup = cgroupMemoryLimit(read)
  return cgroup.bytes > 0 && cgroup.bytes < setting ? { ...cgroup, settingAbove: setting } : own
}

/** What to tell the operator of the limit taken: a MEMORY_LIMIT_BYTES above the cgroup's limit, not used. */
export function memoryLimitWarnings (limit: MemoryLimit): string[] {
  if (limit.settingAbove === undefined) return []
  return [`MEMORY_LIMIT_BYTES ${limit.settingAbove} is above the ${limit.source} limit of ${limit.bytes} bytes (${limit.file ?? 'its group'}), where the kernel kills the process: the cgroup's limit is used; lower MEMORY_LIMIT_BYTES or unset it`]
}
