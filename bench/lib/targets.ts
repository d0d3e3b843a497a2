// What the load generator talks to, and how each is started and pinned: direct (the
// upstream itself), a sidecar build (DIR/dist/main.js), the bundle (dist/bundle/main.js, with
// or without the compile cache filled for it) or a floor script (bench/floors/*.js), run by
// the node binary and flags given, and nginx. Every proxy runs on the proxy core.
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { writeNginxConfig } from './nginx.js'
import { die, log, REPO, type Options } from './options.js'
import { childrenOf, type Watched } from './proc.js'
import { freePort, httpOk, launch, tcpAccepts, waitFor, type Spawned } from './processes.js'

export const STATIC_AUTHORIZATION = 'Bearer bench-static-token-0123456789abcdef'
export const SMALL_PATH = '/v2/store/products/LM358BIDR?currency=USD'
const DEMO_CLIENT_ID = 'demo-client'
const DEMO_CLIENT_SECRET = 'Zm9v+YmFy/c2VjcmV0='

export interface Target {
  name: string
  kind: 'direct' | 'sidecar' | 'floor' | 'nginx'
  port: number
  /** Headers the load generator sets: only direct sets the Bearer header itself. */
  headers: Record<string, string>
  proc: Watched | undefined
  idleRssMiB?: number
  idleRssAnonMiB?: number
}

export interface Env {
  o: Options
  runDir: string
  logDir: string
  standInPort: number
  upstreamPort: number
  upstream: Spawned
  proxyCore: number | undefined
  loadCore: number | undefined
}

/** The compile cache of the bundle targets: --compile-cache, or the run's directory. */
export function compileCacheDir (env: Env): string {
  return env.o.compileCache ?? join(env.runDir, 'compile-cache')
}

/**
 * Fills the compile cache before anything is measured, as an image build would: the bundle
 * started by NODE (binary and flags) until ready, then stopped (scripts/fill-compile-cache.mjs).
 */
export function fillCompileCache (env: Env, node: string, bundle: string): void {
  const [bin, flags] = nodeCommand(node)
  const r = spawnSync(bin, [...flags, join(REPO, 'scripts', 'fill-compile-cache.mjs'), compileCacheDir(env), bundle], {
    env: { PATH: process.env.PATH }, encoding: 'utf8'
  })
  if (r.status !== 0) die(`filling the compile cache failed:\n${r.stdout}${r.stderr}`)
  log(r.stdout.trim())
}

export function sidecarEnv (env: Env, port: number, adminPort: number, compileCache = false): NodeJS.ProcessEnv {
  // The default configuration: only what must be set, nothing tuned.
  return {
    ...(compileCache ? { NODE_COMPILE_CACHE: compileCacheDir(env) } : {}),
    PATH: process.env.PATH,
    AUTH_URL: `http://127.0.0.1:${env.standInPort}`,
    UPSTREAM_URL: `http://127.0.0.1:${env.upstreamPort}`,
    CLIENT_ID: DEMO_CLIENT_ID,
    CLIENT_SECRET: DEMO_CLIENT_SECRET,
    PORT: String(port),
    ADMIN_HOST: '127.0.0.1',
    ADMIN_PORT: String(adminPort)
  }
}

/** What a sidecar target runs: DIR/dist/main.js, or the script itself when a .js file is given (bench/floors/). */
export function entryPoint (dir: string): string {
  return dir.endsWith('.js') ? dir : join(dir, 'dist', 'main.js')
}

/** A node command line: the binary, then any flags given with it ("node --max-semi-space-size=4"). */
export function nodeCommand (node: string): [string, string[]] {
  const [bin, ...flags] = node.trim().split(/\s+/)
  return [bin ?? node, flags]
}

export function sidecarArgs (env: Env, dir: string, name: string, flags: string[]): string[] {
  const prof = env.o.cpuProf === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', join(env.o.cpuProf, name)]
  return [...flags, ...prof, entryPoint(dir)]
}

/** A sidecar build, or a floor (bench/floors/*.js, started the same way, with the same variables). */
export async function startSidecar (
  env: Env, name: string, dir: string, node: string, kind: 'sidecar' | 'floor' = 'sidecar', compileCache = false
): Promise<{ target: Target, process: Spawned }> {
  const port = await freePort()
  const adminPort = await freePort()
  const [bin, flags] = nodeCommand(node)
  const p = launch(name, bin, sidecarArgs(env, dir, name, flags), {
    env: sidecarEnv(env, port, adminPort, compileCache), logDir: env.logDir, ...(env.proxyCore === undefined ? {} : { core: env.proxyCore })
  })
  await waitFor(`${name} readiness`, () => httpOk(`http://127.0.0.1:${adminPort}/readyz`), 20_000, 20)
  return { target: { name, kind, port, headers: {}, proc: { pids: () => [p.pid] } }, process: p }
}

export async function startNginx (env: Env): Promise<{ target: Target, process: Spawned }> {
  const port = await freePort()
  const prefix = join(env.runDir, 'nginx')
  const conf = writeNginxConfig({ prefix, port, upstreamPort: env.upstreamPort, authorization: STATIC_AUTHORIZATION })
  const p = launch('nginx', 'nginx', ['-p', prefix, '-c', conf, '-g', 'daemon off; master_process on;'], {
    logDir: env.logDir, ...(env.proxyCore === undefined ? {} : { core: env.proxyCore })
  })
  await waitFor('nginx', () => tcpAccepts(port), 10_000, 20)
  const master = p.pid
  return { target: { name: 'nginx', kind: 'nginx', port, headers: {}, proc: { pids: () => [master, ...childrenOf(master)] } }, process: p }
}
