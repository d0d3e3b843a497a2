// Start-up: spawn → TCP connect accepted on PORT, spawn → /readyz 200 (first token), the
// process's CPU time (utime + stime) at each of those moments, and the idle memory 1 s after
// ready. The CPU is the start-up's cost to the node it runs on, steadier than the wall time
// on a busy machine (it leaves out the time spent waiting for a core).
import { cpuSeconds, rssAnonOf, rssOf } from '../proc.js'
import { freePort, httpOk, launch, sleep, stop, tcpAccepts, waitFor } from '../processes.js'
import { entryPoint, nodeCommand, sidecarEnv, type Env } from '../targets.js'

export interface StartupRun {
  name: string
  listeningMs: number
  readyMs: number
  /** utime + stime of the process when PORT first accepted, in ms (clock-tick resolution, 10 ms here). */
  cpuToListeningMs: number
  /** utime + stime when /readyz first answered 200: the start-up's CPU, polling included (below). */
  cpuToReadyMs: number
  idleRssMiB: number
  /** RssAnon at the same moment: private memory. */
  idleRssAnonMiB: number
}

export async function startup (env: Env, name: string, dir: string, node: string, i: number, compileCache = false): Promise<StartupRun> {
  const port = await freePort()
  const adminPort = await freePort()
  const started = performance.now()
  const [bin, flags] = nodeCommand(node)
  const p = launch(`${name}-startup-${i}`, bin, [...flags, entryPoint(dir)], {
    env: sidecarEnv(env, port, adminPort, compileCache), logDir: env.logDir, ...(env.proxyCore === undefined ? {} : { core: env.proxyCore })
  })
  // A refused connect costs the process nothing; once it listens, the accepted probe connection
  // and the /readyz polls (every 2 ms until the token is held) are counted in its CPU, alike
  // for every target.
  await waitFor(`${name} to listen`, () => tcpAccepts(port), 15_000, 1)
  const listeningMs = performance.now() - started
  const cpuToListeningMs = (cpuSeconds(p.pid) ?? NaN) * 1000
  await waitFor(`${name} to be ready`, () => httpOk(`http://127.0.0.1:${adminPort}/readyz`), 15_000, 2)
  const readyMs = performance.now() - started
  const cpuToReadyMs = (cpuSeconds(p.pid) ?? NaN) * 1000
  await sleep(1000)
  const idleRssMiB = rssOf({ pids: () => [p.pid] })
  const idleRssAnonMiB = rssAnonOf({ pids: () => [p.pid] })
  await stop(p)
  return { name, listeningMs, readyMs, cpuToListeningMs, cpuToReadyMs, idleRssMiB, idleRssAnonMiB }
}
