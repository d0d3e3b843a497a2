// The built sidecar, run as the image runs it (`npm start`'s node flags, the Dockerfile's
// GLIBC_TUNABLES, the default configuration), inside a memory cgroup of its own of 128 MiB:
// the tests under test/overload/cgroup-*.test.ts drive loads against it. Needs root and a
// memory cgroup this process may make a child of (cgroup v1's memory.limit_in_bytes, or v2's
// memory.max); setUpCgroup says which is missing elsewhere.
import { spawn } from 'node:child_process'
import { readdirSync, readFileSync, rmdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { onExit } from 'signal-exit'
import type { Test } from 'tap'
import { imageGlibcTunables, inCgroup, sidecarEnv, startLoadUpstream, type LoadUpstream } from '../../bench/lib/four-loads.js'
import { createMemoryCgroup, type MemoryCgroup } from '../../bench/lib/memory-cgroup.js'
import { freePort } from '../../bench/lib/processes.js'
import { shippedNodeFlags } from '../../bench/lib/shipped.js'
import { startStandIn } from './build.js'
import { eventually } from './eventually.js'
import { MAIN, reapOnExit, staleBuild } from './process.js'

const REPO = fileURLToPath(new URL('../../', import.meta.url))
export const CGROUP_LIMIT_BYTES = 128 * 1024 * 1024
const GROUP_PREFIX = 'overload-test-'
/** Start-up takes 0.4–0.6 s of CPU; with both cores kept busy by others it once took over 20 s. */
const READY_WITHIN_MS = 60_000

/** Whether the test process that named a group `GROUP_PREFIX<pid>` still runs. */
function running (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH'
  }
}

/**
 * Groups left by a run that was killed before it could remove its own: empty ones whose test
 * process is gone. A running test file's group is empty until its sidecar starts, and tap runs
 * files side by side: removing it made that file's sidecar fail to start.
 */
function removeStaleGroups (cgroup: MemoryCgroup): void {
  const parent = dirname(cgroup.dir)
  for (const name of readdirSync(parent)) {
    if (!name.startsWith(GROUP_PREFIX) || join(parent, name) === cgroup.dir) continue
    const pid = Number(name.slice(GROUP_PREFIX.length))
    if (Number.isInteger(pid) && pid > 0 && running(pid)) continue
    try {
      if (readFileSync(join(parent, name, 'cgroup.procs'), 'utf8').trim() === '') rmdirSync(join(parent, name))
    } catch {}
  }
}

/**
 * The group the sidecar runs in, or why this machine cannot run the test (`more` says what
 * else it needs: a skip line, or false). Throws on a stale build.
 */
export function setUpCgroup (more: () => string | false = () => false): MemoryCgroup | string {
  if (process.getuid?.() !== 0) return 'not root: a memory cgroup cannot be made'
  const missing = more()
  if (missing !== false) return missing
  const stale = staleBuild()
  if (stale !== '') throw new Error(stale)
  try {
    const cgroup = createMemoryCgroup(`${GROUP_PREFIX}${process.pid}`, CGROUP_LIMIT_BYTES)
    removeStaleGroups(cgroup)
    return cgroup
  } catch (err) {
    return `no writable memory cgroup: ${(err as Error).message}`
  }
}

export interface CgroupSidecar {
  port: number
  adminPort: number
  upstream: LoadUpstream
  alive: () => boolean
  stderr: () => string
}

/**
 * Starts the sidecar in `cgroup` against the load upstream and a stand-in token endpoint,
 * and waits for its first token; undefined (the test failed, saying why) when it did not
 * start. However the file ends (a timeout's signal included), the sidecar is killed, then its
 * group removed.
 */
export async function startInCgroup (t: Test, cgroup: MemoryCgroup, extraEnv: NodeJS.ProcessEnv = {}): Promise<CgroupSidecar | undefined> {
  const standIn = await startStandIn(t)
  const upstream = startLoadUpstream()
  t.teardown(upstream.close)
  const [port, adminPort] = [await freePort(), await freePort()]
  const env = sidecarEnv({ standIn: Number(new URL(standIn.url).port), upstream: await upstream.port, proxy: port, admin: adminPort },
    { GLIBC_TUNABLES: imageGlibcTunables(REPO), ...extraEnv })
  const [command, args] = inCgroup(cgroup.procsFile, [process.execPath, ...shippedNodeFlags(REPO), MAIN, 'serve'])
  const sidecar = spawn(command, args, { env, stdio: ['ignore', 'ignore', 'pipe'] })
  reapOnExit(sidecar)
  let stderr = ''
  sidecar.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const removeGroup = (): void => {
    if (sidecar.exitCode === null && sidecar.signalCode === null) sidecar.kill('SIGKILL')
    cgroup.remove()
  }
  const cancelOnExit = onExit(removeGroup)
  t.teardown(async () => {
    cancelOnExit()
    if (sidecar.exitCode === null && sidecar.signalCode === null) {
      sidecar.kill('SIGKILL')
      await new Promise((resolve) => sidecar.once('exit', resolve))
    }
    cgroup.remove()
  })
  const alive = (): boolean => sidecar.exitCode === null && sidecar.signalCode === null

  const ready = await eventually(t, 'the sidecar ready (its first token)', async () => {
    if (!alive()) return true
    try {
      return (await fetch(`http://127.0.0.1:${adminPort}/readyz`, { signal: AbortSignal.timeout(2000) })).status === 200
    } catch {
      return false
    }
  }, READY_WITHIN_MS)
  if (!ready || !alive()) {
    t.fail(`the sidecar did not start: exit ${sidecar.exitCode} ${sidecar.signalCode}\n${stderr}`)
    return undefined
  }
  return { port, adminPort, upstream, alive, stderr: () => stderr }
}
