// Fills Node's compile cache for the bundle (dist/bundle/main.js) by starting it the way a
// pod does, until ready, and stopping it: node writes the entry to CACHE_DIR as it exits
// (NODE_COMPILE_CACHE). Run it with the node binary and flags that will run the bundle:
//
//   node [flags] scripts/fill-compile-cache.mjs CACHE_DIR [BUNDLE]
//
// On Node 24.21 the entry holds the V8 code made as the bundle was compiled (its top level
// and what V8 compiles eagerly, 0.27 MiB), the same whatever the start then ran: a start to
// ready costs a second, proves the bundle starts, and serves a node that would keep more.
//
// Needs no credentials and no network: the token comes from the stand-in TI APIs of the same
// bundle (`stand-in`, with its demo credentials) on 127.0.0.1, and the upstream is never
// called. Node keys the cache by its own version, the CPU architecture, the uid, and the
// bundle's absolute path and content: fill it with the node binary, uid and path that will
// run it. Any mismatch is a miss, never a failure (bench/README.md, "Start-up").
//
// Exits non-zero, with the sidecar's output, if the sidecar does not become ready or no
// cache entry was written or the written one is not accepted by a second start.
import { spawn, spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, readdirSync, statSync } from 'node:fs'
import { once } from 'node:events'
import { createServer } from 'node:net'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

const READY_TIMEOUT_MS = 30_000
const DEMO_CLIENT_ID = 'demo-client'
const DEMO_CLIENT_SECRET = 'Zm9v+YmFy/c2VjcmV0='

const [cacheArg, bundleArg = 'dist/bundle/main.js'] = process.argv.slice(2)
if (cacheArg === undefined) {
  process.stderr.write('usage: node [flags] scripts/fill-compile-cache.mjs CACHE_DIR [BUNDLE]\n')
  process.exit(2)
}
const cacheDir = resolve(cacheArg)
const bundle = resolve(bundleArg)

async function freePort () {
  const s = createServer().listen(0, '127.0.0.1')
  await once(s, 'listening')
  const { port } = s.address()
  s.close()
  return port
}

/** The environment without a compile cache: only the sidecar's start may write the entry. */
function baseEnv () {
  const env = { ...process.env }
  delete env.NODE_COMPILE_CACHE
  return env
}

function start (args, env) {
  const child = spawn(process.execPath, [...process.execArgv, bundle, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  child.stdout.on('data', (c) => { output += c })
  child.stderr.on('data', (c) => { output += c })
  const exited = once(child, 'exit').then(([code, signal]) => code ?? signal)
  return { child, exited, output: () => output }
}

async function readyz (port) {
  try {
    return (await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) })).status === 200
  } catch {
    return false
  }
}

function fail (message, ...procs) {
  process.stderr.write(`fill-compile-cache: ${message}\n${procs.map((p) => p.output()).join('\n')}\n`)
  for (const p of procs) p.child.kill('SIGKILL')
  process.exit(1)
}

/** Every file under dir, with its path. */
function files (dir) {
  return readdirSync(dir, { recursive: true }).map((f) => join(dir, String(f))).filter((f) => statSync(f).isFile())
}

mkdirSync(cacheDir, { recursive: true })
const standInPort = await freePort()
const standIn = start(['stand-in'], { ...baseEnv(), STAND_IN_PORT: String(standInPort), LOG_LEVEL: 'warn' })
const [port, adminPort] = [await freePort(), await freePort()]
// The shipped defaults otherwise (LOG_LEVEL info, no rules): the start-up a pod runs.
const sidecar = start(['serve'], {
  ...baseEnv(),
  NODE_COMPILE_CACHE: cacheDir,
  AUTH_URL: `http://127.0.0.1:${standInPort}`,
  UPSTREAM_URL: `http://127.0.0.1:${standInPort}`,
  CLIENT_ID: DEMO_CLIENT_ID,
  CLIENT_SECRET: DEMO_CLIENT_SECRET,
  PORT: String(port),
  ADMIN_HOST: '127.0.0.1',
  ADMIN_PORT: String(adminPort)
})
const deadline = Date.now() + READY_TIMEOUT_MS
while (!await readyz(adminPort)) {
  if (Date.now() > deadline) fail(`the sidecar was not ready within ${READY_TIMEOUT_MS} ms`, sidecar, standIn)
  await sleep(20)
}
// SIGTERM: the sidecar's own graceful stop; node writes the cache as it exits.
sidecar.child.kill('SIGTERM')
const code = await sidecar.exited
standIn.child.kill('SIGTERM')
await standIn.exited
if (code !== 0) fail(`the sidecar exited ${code} on SIGTERM`, sidecar)

const written = files(cacheDir)
if (written.length === 0) fail(`no cache entry was written to ${cacheDir}`, sidecar)
// Node writes entries 0600 for the uid that filled them; the image copies them as root's:
// readable by every uid (the uid is part of the cache's path anyway), writable by none.
for (const f of written) chmodSync(f, 0o444)

// A second start of the same bundle must accept what was written.
const check = spawnSync(process.execPath, [...process.execArgv, bundle, '--version'], {
  env: { ...baseEnv(), NODE_COMPILE_CACHE: cacheDir, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' }, encoding: 'utf8'
})
if (!/V8 code cache for ESM \S+ was accepted/.test(check.stderr)) fail(`the cache written is not accepted:\n${check.stderr}`, sidecar)
const bytes = written.reduce((sum, f) => sum + statSync(f).size, 0)
process.stdout.write(`fill-compile-cache: ${written.length} entr${written.length === 1 ? 'y' : 'ies'}, ${bytes} bytes in ${cacheDir}, for ${bundle}\n`)
