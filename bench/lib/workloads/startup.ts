// Start-up: spawn → TCP connect accepted on PORT, spawn → /readyz 200 (first token),
// and the idle memory 1 s after ready.
import { rssAnonOf, rssOf } from '../proc.js'
import { freePort, httpOk, launch, sleep, stop, tcpAccepts, waitFor } from '../processes.js'
import { entryPoint, nodeCommand, sidecarEnv, type Env } from '../targets.js'

export interface StartupRun {
  name: string
  listeningMs: number
  readyMs: number
  idleRssMiB: number
  /** RssAnon at the same moment: private memory. */
  idleRssAnonMiB: number
}

export async function startup (env: Env, name: string, dir: string, node: string, i: number): Promise<StartupRun> {
  const port = await freePort()
  const adminPort = await freePort()
  const started = performance.now()
  const [bin, flags] = nodeCommand(node)
  const p = launch(`${name}-startup-${i}`, bin, [...flags, entryPoint(dir)], {
    env: sidecarEnv(env, port, adminPort), logDir: env.logDir, ...(env.proxyCore === undefined ? {} : { core: env.proxyCore })
  })
  await waitFor(`${name} to listen`, () => tcpAccepts(port), 15_000, 1)
  const listeningMs = performance.now() - started
  await waitFor(`${name} to be ready`, () => httpOk(`http://127.0.0.1:${adminPort}/readyz`), 15_000, 2)
  const readyMs = performance.now() - started
  await sleep(1000)
  const idleRssMiB = rssOf({ pids: () => [p.pid] })
  const idleRssAnonMiB = rssAnonOf({ pids: () => [p.pid] })
  await stop(p)
  return { name, listeningMs, readyMs, idleRssMiB, idleRssAnonMiB }
}
