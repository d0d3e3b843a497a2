// The same-run benchmark of issue 5: one workload at a time, against every
// target in turn (A B C A B C ...), several rounds, medians and ratios.
//
//   npm run bench                      (builds src/ and bench/, then this file)
//   npm run bench -- --rounds 7 --saturation-s 8
//   npm run bench:smoke                every workload for about a second (CI)
//
// See bench/README.md for the options, the layout of the run and the results.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createWriteStream, mkdirSync, writeFileSync, existsSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { cpus, totalmem } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { writeNginxConfig } from './lib/nginx.js'
import { shippedNodeFlags } from './lib/shipped.js'
import {
  coreTicks, cpuOf, cpuSeconds, childrenOf, CLK_TCK, peakRssOf, resetPeakRssOf, rssOf, setPriorityAll, type Watched
} from './lib/proc.js'
import { median, ratio } from './lib/stats.js'

const HERE = dirname(fileURLToPath(import.meta.url)) // dist/bench
const REPO = resolve(HERE, '..', '..')
const STATIC_AUTHORIZATION = 'Bearer bench-static-token-0123456789abcdef'
const SMALL_PATH = '/v2/store/products/LM358BIDR?currency=USD'
const DEMO_CLIENT_ID = 'demo-client'
const DEMO_CLIENT_SECRET = 'Zm9v+YmFy/c2VjcmV0='
const MIB = 1024 * 1024

// ---------------------------------------------------------------- options

interface Options {
  smoke: boolean
  rounds: number
  saturationS: number
  connections: number
  rate: number
  rateS: number
  rateWarmupS: number
  streamBytes: number
  streamRounds: number
  startups: number
  warmupS: number
  workloads: Set<string>
  sidecars: Array<{ name: string, dir: string, node: string | undefined }>
  withNginx: boolean
  withDirect: boolean
  node: string
  pin: boolean
  proxyCore: number
  loadCore: number
  cpuProf: string | undefined
  out: string | undefined
  quietWaitS: number
  quietPct: number
  noisyPct: number
  retries: number
  rateNice: number
}

const USAGE = `usage: node dist/bench/run.js [options]
  --smoke                 every workload for about a second, one round (CI)
  --rounds N              rounds of saturation and fixed rate (default 5)
  --saturation-s S        seconds per saturation run (default 5)
  --connections N         saturation connections (default 32)
  --rate R                fixed rate, requests/s (default 1000)
  --rate-s S              seconds per fixed-rate run, after a 1 s warm-up (default 10)
  --stream-mib N          size of the streamed body (default 100)
  --stream-rounds N       rounds of the streaming workload (default 3)
  --startups N            sidecar starts timed (default 5)
  --warmup-s S            unrecorded saturation run per target before measuring (default 3)
  --workloads LIST        any of saturation,rate,stream,startup (default all)
  --sidecar NAME=DIR[@NODE]  a sidecar build to measure (repeatable; default sidecar=<this repo>);
                          DIR must hold a built dist/main.js: use it for A/B runs of a changed copy;
                          or a script instead of DIR, e.g. a floor: dist/bench/floors/node-floor.js;
                          @NODE runs this one with another node binary, and flags: @"/path/node --flag"
                          (without @NODE: the node flags of DIR's "npm start", as shipped)
  --no-nginx, --no-direct leave a target out
  --node PATH             node binary (and flags) for the sidecars (default: the one running this script)
  --no-pin                do not pin with taskset
  --cpu-prof DIR          run the sidecars with --cpu-prof, profiles written to DIR at the end
  --out DIR               where results go (default bench/results/<timestamp>)
  --quiet-wait-s S        before each run, wait up to S s (default 60; smoke 0) for the machine's CPU
  --quiet-pct P           use by others to fall below P % of the machine (default 15)
  --noisy-pct P           a saturation or fixed-rate run during which others used more than P % of the
                          machine (default 25) is repeated, at most --retries times (default 2)
  --rate-nice N           nice value of the proxy, upstream and generator during fixed-rate runs
                          (default -10; 0 to leave priorities alone)`

function parseOptions (argv: string[]): Options {
  const o: Options = {
    smoke: false,
    rounds: 5,
    saturationS: 5,
    connections: 32,
    rate: 1000,
    rateS: 10,
    rateWarmupS: 1,
    streamBytes: 100 * MIB,
    streamRounds: 3,
    startups: 5,
    warmupS: 3,
    workloads: new Set(['startup', 'saturation', 'rate', 'stream']),
    sidecars: [],
    withNginx: true,
    withDirect: true,
    node: process.execPath,
    pin: true,
    proxyCore: 0,
    loadCore: 1,
    cpuProf: undefined,
    out: undefined,
    quietWaitS: 60,
    quietPct: 15,
    noisyPct: 25,
    retries: 2,
    rateNice: -10
  }
  const given = new Set<string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    const value = (): string => {
      const v = argv[++i]
      if (v === undefined) die(`${arg} needs a value\n${USAGE}`)
      return v
    }
    const number = (): number => {
      const v = Number(value())
      if (!Number.isFinite(v) || v <= 0) die(`${arg} needs a positive number`)
      return v
    }
    given.add(arg)
    switch (arg) {
      case '--smoke': o.smoke = true; break
      case '--rounds': o.rounds = number(); break
      case '--saturation-s': o.saturationS = number(); break
      case '--connections': o.connections = number(); break
      case '--rate': o.rate = number(); break
      case '--rate-s': o.rateS = number(); break
      case '--stream-mib': o.streamBytes = Math.round(number() * MIB); break
      case '--stream-rounds': o.streamRounds = number(); break
      case '--startups': o.startups = number(); break
      case '--warmup-s': o.warmupS = number(); break
      case '--workloads': o.workloads = new Set(value().split(',')); break
      case '--sidecar': {
        const m = /^([\w.-]+)=([^@]+)(?:@(.+))?$/.exec(value())
        if (m?.[1] === undefined || m[2] === undefined) die('--sidecar needs NAME=DIR or NAME=DIR@NODE')
        o.sidecars.push({ name: m[1], dir: resolve(m[2]), node: m[3] })
        break
      }
      case '--no-nginx': o.withNginx = false; break
      case '--no-direct': o.withDirect = false; break
      case '--node': o.node = value(); break
      case '--no-pin': o.pin = false; break
      case '--cpu-prof': o.cpuProf = resolve(value()); break
      case '--out': o.out = resolve(value()); break
      case '--quiet-wait-s': o.quietWaitS = Number(value()); break
      case '--quiet-pct': o.quietPct = number(); break
      case '--noisy-pct': o.noisyPct = number(); break
      case '--retries': o.retries = Number(value()); break
      case '--rate-nice': o.rateNice = Number(value()); break
      case '--help': process.stdout.write(USAGE + '\n'); process.exit(0); break
      default: die(`unknown option ${arg}\n${USAGE}`)
    }
  }
  if (o.sidecars.length === 0) o.sidecars.push({ name: 'sidecar', dir: REPO, node: undefined })
  // Without @NODE, a sidecar runs as shipped: with the node flags of its `npm start`.
  for (const s of o.sidecars) s.node ??= [o.node, ...shippedNodeFlags(s.dir.endsWith('.js') ? REPO : s.dir)].join(' ')
  if (o.smoke) {
    if (!given.has('--rounds')) o.rounds = 1
    if (!given.has('--saturation-s')) o.saturationS = 1
    if (!given.has('--rate-s')) o.rateS = 1
    o.rateWarmupS = 0.2
    if (!given.has('--stream-mib')) o.streamBytes = 16 * MIB
    if (!given.has('--stream-rounds')) o.streamRounds = 1
    if (!given.has('--startups')) o.startups = 1
    if (!given.has('--warmup-s')) o.warmupS = 1
    if (!given.has('--quiet-wait-s')) o.quietWaitS = 0
    if (!given.has('--retries')) o.retries = 0
  }
  for (const w of o.workloads) {
    if (!['startup', 'saturation', 'rate', 'stream'].includes(w)) die(`unknown workload ${w}`)
  }
  return o
}

function die (message: string): never {
  process.stderr.write(`bench: ${message}\n`)
  process.exit(2)
}

function log (message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`)
}

// ---------------------------------------------------------------- processes

const children = new Set<ChildProcess>()

function killAll (): void {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) continue
    // nginx's worker would outlive a killed master: its children go first.
    for (const pid of childrenOf(child.pid)) {
      try { process.kill(pid, 'SIGKILL') } catch {}
    }
    child.kill('SIGKILL')
  }
}
process.on('exit', killAll)
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => { killAll(); process.exit(130) })
}

interface Spawned {
  child: ChildProcess
  pid: number
  exited: Promise<number | null>
  stdout: () => string
}

function launch (
  name: string, command: string, args: string[],
  { core, env, logDir, keepStdout = false }: { core?: number, env?: NodeJS.ProcessEnv, logDir: string, keepStdout?: boolean }
): Spawned {
  const [cmd, argv] = core === undefined ? [command, args] : ['taskset', ['-c', String(core), command, ...args]]
  const child = spawn(cmd, argv, { env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  const logFile = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' })
  let out = ''
  child.stdout?.on('data', (c: Buffer) => { if (keepStdout) out += c.toString(); logFile.write(c) })
  child.stderr?.on('data', (c: Buffer) => { logFile.write(c) })
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => { children.delete(child); resolve(code) })
  })
  child.on('close', () => { logFile.end() })
  if (child.pid === undefined) die(`could not start ${command}`)
  // taskset execs the command, so the pid is the command's own.
  return { child, pid: child.pid, exited, stdout: () => out }
}

async function stop (p: Spawned, signal: NodeJS.Signals = 'SIGTERM', graceMs = 15_000): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return
  p.child.kill(signal)
  const timer = setTimeout(() => { p.child.kill('SIGKILL') }, graceMs)
  await p.exited
  clearTimeout(timer)
}

/** Runs a command to its end (bounded) and returns its stdout. */
async function runToEnd (name: string, command: string, args: string[], logDir: string, limitMs: number, core?: number, onPid?: (pid: number) => void): Promise<string> {
  const p = launch(name, command, args, { logDir, keepStdout: true, ...(core === undefined ? {} : { core }) })
  onPid?.(p.pid)
  const timer = setTimeout(() => { p.child.kill('SIGKILL') }, limitMs)
  await p.exited
  clearTimeout(timer)
  await new Promise((resolve) => setImmediate(resolve))
  return p.stdout()
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => { resolve(port) })
    })
  })
}

function tcpAccepts (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { socket.destroy(); resolve(false) })
  })
}

async function waitFor (what: string, check: () => Promise<boolean>, limitMs = 15_000, everyMs = 2): Promise<void> {
  const until = performance.now() + limitMs
  while (performance.now() < until) {
    if (await check()) return
    await sleep(everyMs)
  }
  throw new Error(`timed out waiting for ${what}`)
}

async function httpOk (url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) })
    await res.arrayBuffer()
    return res.status === 200
  } catch {
    return false
  }
}

// ---------------------------------------------------------------- targets

interface Target {
  name: string
  kind: 'direct' | 'sidecar' | 'nginx'
  port: number
  /** Headers the load generator sets: only direct sets the Bearer header itself. */
  headers: Record<string, string>
  proc: Watched | undefined
  idleRssMiB?: number
}

interface Env {
  o: Options
  runDir: string
  logDir: string
  standInPort: number
  upstreamPort: number
  upstream: Spawned
  proxyCore: number | undefined
  loadCore: number | undefined
}

function sidecarEnv (env: Env, port: number, adminPort: number): NodeJS.ProcessEnv {
  // The default configuration: only what must be set, nothing tuned.
  return {
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
function entryPoint (dir: string): string {
  return dir.endsWith('.js') ? dir : join(dir, 'dist', 'main.js')
}

/** A node command line: the binary, then any flags given with it ("node --max-semi-space-size=4"). */
function nodeCommand (node: string): [string, string[]] {
  const [bin, ...flags] = node.trim().split(/\s+/)
  return [bin ?? node, flags]
}

function sidecarArgs (env: Env, dir: string, name: string, flags: string[]): string[] {
  const prof = env.o.cpuProf === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', join(env.o.cpuProf, name)]
  return [...flags, ...prof, entryPoint(dir)]
}

async function startSidecar (env: Env, name: string, dir: string, node: string): Promise<{ target: Target, process: Spawned }> {
  const port = await freePort()
  const adminPort = await freePort()
  const [bin, flags] = nodeCommand(node)
  const p = launch(name, bin, sidecarArgs(env, dir, name, flags), {
    env: sidecarEnv(env, port, adminPort), logDir: env.logDir, ...(env.proxyCore === undefined ? {} : { core: env.proxyCore })
  })
  await waitFor(`${name} readiness`, () => httpOk(`http://127.0.0.1:${adminPort}/readyz`), 20_000, 20)
  return { target: { name, kind: 'sidecar', port, headers: {}, proc: { pids: () => [p.pid] } }, process: p }
}

async function startNginx (env: Env): Promise<{ target: Target, process: Spawned }> {
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

// ---------------------------------------------------------------- measuring one run

interface Sampler {
  stop: () => { peakRssMiB: number, loadCpuS: number }
}

/** Samples the proxy's RSS (and the load generator's CPU, which is gone once it exits) while a run lasts. */
function sample (target: Target, loadPid: () => number | undefined, everyMs: number): Sampler {
  let peak = target.proc === undefined ? NaN : rssOf(target.proc)
  let loadCpu = 0
  const timer = setInterval(() => {
    if (target.proc !== undefined) peak = Math.max(peak, rssOf(target.proc))
    const pid = loadPid()
    if (pid !== undefined) loadCpu = cpuSeconds(pid) ?? loadCpu
  }, everyMs)
  return {
    stop: () => {
      clearInterval(timer)
      return { peakRssMiB: target.proc === undefined ? NaN : Math.max(peak, peakRssOf(target.proc)), loadCpuS: loadCpu }
    }
  }
}

interface CpuSnapshot { proxy: number, upstream: number, self: number, coreBusy: number, machineBusy: number, machineTotal: number }

function snapshot (env: Env, target: Target): CpuSnapshot {
  const cores = coreTicks()
  const usage = process.cpuUsage()
  return {
    proxy: target.proc === undefined ? NaN : cpuOf(target.proc),
    upstream: cpuSeconds(env.upstream.pid) ?? NaN,
    self: (usage.user + usage.system) / 1e6,
    coreBusy: env.proxyCore === undefined ? NaN : (cores[env.proxyCore]?.busy ?? NaN) / CLK_TCK,
    machineBusy: cores.reduce((a, c) => a + c.busy, 0) / CLK_TCK,
    machineTotal: cores.reduce((a, c) => a + c.total, 0) / CLK_TCK
  }
}

interface CpuResult {
  proxyCpuS: number
  proxyCpuPerReqUs: number
  proxyCoreBusyPerReqUs: number
  upstreamCpuPerReqUs: number
  loadCpuPerReqUs: number
  /** Busy CPU of the machine not spent by the processes of this benchmark: other work on a shared machine. */
  foreignCpuPct: number
  /** How busy the machine was (all of it someone else's) just before the run. */
  busyBeforePct?: number
}

function cpuResult (a: CpuSnapshot, b: CpuSnapshot, requests: number, loadCpuS: number): CpuResult {
  const proxy = b.proxy - a.proxy
  const upstream = b.upstream - a.upstream
  const wall = (b.machineTotal - a.machineTotal)
  const ours = (Number.isNaN(proxy) ? 0 : proxy) + upstream + loadCpuS + (b.self - a.self)
  const perReq = (s: number): number => requests > 0 ? s / requests * 1e6 : NaN
  return {
    proxyCpuS: proxy,
    proxyCpuPerReqUs: perReq(proxy),
    proxyCoreBusyPerReqUs: perReq(b.coreBusy - a.coreBusy),
    upstreamCpuPerReqUs: perReq(upstream),
    loadCpuPerReqUs: perReq(loadCpuS),
    foreignCpuPct: wall > 0 ? Math.max(0, (b.machineBusy - a.machineBusy - ours) / wall * 100) : NaN
  }
}

/**
 * On a shared machine, other work skews a run. Between runs every process of the
 * benchmark is idle, so whatever keeps the cores busy is someone else's: wait (bounded)
 * until it falls below quietPct, and return the share seen last.
 */
async function waitQuiet (env: Env): Promise<number> {
  const until = performance.now() + env.o.quietWaitS * 1000
  let waited = false
  for (;;) {
    const a = coreTicks()
    await sleep(500)
    const b = coreTicks()
    const busy = b.reduce((x, c) => x + c.busy, 0) - a.reduce((x, c) => x + c.busy, 0)
    const total = b.reduce((x, c) => x + c.total, 0) - a.reduce((x, c) => x + c.total, 0)
    const pct = total > 0 ? busy / total * 100 : 0
    if (pct <= env.o.quietPct || performance.now() >= until) {
      if (waited) log(`  machine ${pct <= env.o.quietPct ? 'quiet' : 'still busy'}: ${f(pct, 0)} % busy`)
      return pct
    }
    if (!waited) log(`  machine busy (${f(pct, 0)} % by other processes): waiting up to ${env.o.quietWaitS} s`)
    waited = true
  }
}

/** Waits for a quiet machine, runs, and repeats (bounded) a run that others disturbed. */
async function measured<T extends SaturationRun | RateRun> (
  env: Env, discarded: Array<SaturationRun | RateRun>, run: () => Promise<T>
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const busyBeforePct = await waitQuiet(env)
    const r = { ...await run(), busyBeforePct }
    if (!(r.foreignCpuPct > env.o.noisyPct) || attempt >= env.o.retries) return r
    log(`  ${r.target} round ${r.round}: other processes used ${f(r.foreignCpuPct, 0)} % of the machine meanwhile: run repeated`)
    discarded.push(r)
  }
}

// ---------------------------------------------------------------- workloads

const WRK_SCRIPT = `-- written by bench/run.ts: one JSON line with the run's figures
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%d,"durationUs":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyUs":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
end
`

interface WrkResult {
  requests: number
  durationUs: number
  errors: Record<string, number>
  latencyUs: Record<string, number>
}

export interface SaturationRun extends CpuResult {
  round: number
  target: string
  requests: number
  rps: number
  errors: number
  latencyMs: Record<string, number>
  peakRssMiB: number
}

async function wrk (env: Env, target: Target, seconds: number, round: number): Promise<SaturationRun> {
  const script = join(env.runDir, 'wrk-report.lua')
  if (!existsSync(script)) writeFileSync(script, WRK_SCRIPT)
  const args = ['-t1', `-c${env.o.connections}`, `-d${Math.max(1, Math.round(seconds))}s`, '--timeout', '5s', '-s', script]
  for (const [k, v] of Object.entries(target.headers)) args.push('-H', `${k}: ${v}`)
  args.push(`http://127.0.0.1:${target.port}${SMALL_PATH}`)
  let pid: number | undefined
  const before = snapshot(env, target)
  const sampler = sample(target, () => pid, 100)
  const out = await runToEnd('wrk', 'wrk', args, env.logDir, (seconds + 30) * 1000, env.loadCore, (p) => { pid = p })
  const after = snapshot(env, target)
  const { peakRssMiB, loadCpuS } = sampler.stop()
  const line = out.split('\n').find((l) => l.startsWith('{"requests"'))
  if (line === undefined) throw new Error(`wrk printed no result against ${target.name}: ${out.slice(0, 500)}`)
  const r = JSON.parse(line) as WrkResult
  const errors = Object.values(r.errors).reduce((a, b) => a + b, 0)
  const toMs = (us: number | undefined): number => (us ?? NaN) / 1000
  return {
    round,
    target: target.name,
    requests: r.requests,
    rps: r.requests / (r.durationUs / 1e6),
    errors,
    latencyMs: {
      p50: toMs(r.latencyUs.p50), p90: toMs(r.latencyUs.p90), p99: toMs(r.latencyUs.p99), p999: toMs(r.latencyUs.p999), max: toMs(r.latencyUs.max)
    },
    peakRssMiB,
    ...cpuResult(before, after, r.requests, loadCpuS)
  }
}

interface PacedResult {
  requests: number
  expected: number
  errors: number
  non2xx: number
  achievedRate: number
  serviceMs: Record<string, number>
  intendedMs: Record<string, number>
  sendLagMs: Record<string, number>
}

export interface RateRun extends CpuResult {
  round: number
  target: string
  requests: number
  errors: number
  achievedRate: number
  serviceMs: Record<string, number>
  intendedMs: Record<string, number>
  sendLagMs: Record<string, number>
  peakRssMiB: number
}

async function paced (env: Env, target: Target, round: number): Promise<RateRun> {
  const { rate, rateS, rateWarmupS } = env.o
  const options = {
    url: `http://127.0.0.1:${target.port}${SMALL_PATH}`, rate, durationS: rateS, warmupS: rateWarmupS, headers: target.headers
  }
  let pid: number | undefined
  // Latency runs need little CPU but suffer from any other work on the cores: raise
  // their priority (the same for every target) while they last.
  const boosted = [...(target.proc?.pids() ?? []), env.upstream.pid]
  if (env.o.rateNice !== 0) for (const p of boosted) setPriorityAll(p, env.o.rateNice)
  const sampler = sample(target, () => pid, 100)
  // CPU is counted over the measured part only: the generator's warm-up is waited out first.
  let before: CpuSnapshot | undefined
  const warmupTimer = setTimeout(() => { before = snapshot(env, target) }, rateWarmupS * 1000 + 60)
  const out = await runToEnd('paced', process.execPath, [join(HERE, 'paced.js'), JSON.stringify(options)], env.logDir,
    (rateWarmupS + rateS + 30) * 1000, env.loadCore, (p) => { pid = p; if (env.o.rateNice !== 0) setPriorityAll(p, env.o.rateNice) })
  clearTimeout(warmupTimer)
  if (env.o.rateNice !== 0) for (const p of boosted) setPriorityAll(p, 0)
  const after = snapshot(env, target)
  const { peakRssMiB, loadCpuS } = sampler.stop()
  const line = out.split('\n').find((l) => l.startsWith('{'))
  if (line === undefined) throw new Error(`the paced generator printed no result against ${target.name}`)
  const r = JSON.parse(line) as PacedResult
  return {
    round,
    target: target.name,
    requests: r.requests,
    errors: r.errors + r.non2xx + (r.expected - r.requests),
    achievedRate: r.achievedRate,
    serviceMs: r.serviceMs,
    intendedMs: r.intendedMs,
    sendLagMs: r.sendLagMs,
    peakRssMiB,
    // The generator's CPU includes its warm-up: scaled to the measured share.
    ...cpuResult(before ?? after, after, r.requests, loadCpuS * rateS / (rateS + rateWarmupS))
  }
}

export interface StreamRun {
  round: number
  target: string
  direction: 'upload' | 'download'
  ok: boolean
  mibPerS: number
  rssBeforeMiB: number
  peakRssMiB: number
  rssRiseMiB: number
  proxyCpuS: number
  busyBeforePct?: number
}

async function stream (env: Env, target: Target, direction: 'upload' | 'download', round: number): Promise<StreamRun> {
  const bytes = env.o.streamBytes
  const rssBefore = target.proc === undefined ? NaN : rssOf(target.proc)
  if (target.proc !== undefined) resetPeakRssOf(target.proc)
  const cpuBefore = target.proc === undefined ? NaN : cpuOf(target.proc)
  const sampler = sample(target, () => undefined, 20)
  const options = { base: `http://127.0.0.1:${target.port}`, direction, bytes, headers: target.headers }
  const out = await runToEnd('stream', process.execPath, [join(HERE, 'stream.js'), JSON.stringify(options)], env.logDir,
    150_000, env.loadCore)
  const { peakRssMiB } = sampler.stop()
  const cpuAfter = target.proc === undefined ? NaN : cpuOf(target.proc)
  const r = JSON.parse(out.split('\n').find((l) => l.startsWith('{')) ?? '{"ok":false}') as { ok: boolean, seconds?: number, error?: string }
  if (!r.ok) log(`  ${direction} through ${target.name} failed: ${r.error ?? 'no result'}`)
  return {
    round,
    target: target.name,
    direction,
    ok: r.ok,
    mibPerS: r.ok && r.seconds !== undefined ? bytes / MIB / r.seconds : NaN,
    rssBeforeMiB: rssBefore,
    peakRssMiB,
    rssRiseMiB: peakRssMiB - rssBefore,
    proxyCpuS: cpuAfter - cpuBefore
  }
}

export interface StartupRun {
  name: string
  listeningMs: number
  readyMs: number
  idleRssMiB: number
}

async function startup (env: Env, name: string, dir: string, node: string, i: number): Promise<StartupRun> {
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
  await stop(p)
  return { name, listeningMs, readyMs, idleRssMiB }
}

// ---------------------------------------------------------------- report

interface Results {
  machine: Record<string, unknown>
  options: Record<string, unknown>
  targets: Array<{ name: string, kind: string, idleRssMiB: number | undefined }>
  startup: StartupRun[]
  saturation: SaturationRun[]
  rate: RateRun[]
  stream: StreamRun[]
  afterLoadRssMiB: Record<string, number>
  /** Runs repeated because other work used the machine meanwhile. */
  discarded: Array<SaturationRun | RateRun>
  profiles?: string
}

const f = (v: number, digits = 1): string => Number.isFinite(v) ? v.toFixed(digits) : '–'
const fx = (v: number): string => Number.isFinite(v) ? `${v.toFixed(2)} ×` : '–'

function med<T> (runs: T[], target: string, pick: (r: T) => number): number {
  return median(runs.filter((r) => (r as { target: string }).target === target).map(pick))
}

/** Per round, target minus direct; the median of those differences. */
function addedOverDirect (runs: RateRun[], target: string, pick: (r: RateRun) => number): number {
  const diffs: number[] = []
  for (const r of runs.filter((x) => x.target === target)) {
    const d = runs.find((x) => x.target === 'direct' && x.round === r.round)
    if (d !== undefined) diffs.push(pick(r) - pick(d))
  }
  return median(diffs)
}

/** Per round, a's figure over b's (measured next to each other); the median of those ratios. */
function pairedRatio<T extends { target: string, round: number }> (runs: T[], a: string, b: string, pick: (r: T) => number): number {
  const ratios: number[] = []
  for (const r of runs.filter((x) => x.target === a)) {
    const other = runs.find((x) => x.target === b && x.round === r.round)
    if (other !== undefined) ratios.push(ratio(pick(r), pick(other)))
  }
  return median(ratios)
}

function report (res: Results, targets: Target[]): string {
  const names = targets.map((t) => t.name)
  const sidecars = targets.filter((t) => t.kind === 'sidecar').map((t) => t.name)
  const lines: string[] = []
  const o = res.options
  lines.push(`machine: ${String(res.machine.cpu)}, ${String(res.machine.cores)} cores, node ${String(res.machine.node)} (sidecars: ${String(res.machine.sidecarNode)}), ${String(res.machine.nginx)}, ${String(res.machine.wrk)}`)
  lines.push(`pinning: ${String(o.pinning)}`)
  lines.push('')

  if (res.startup.length > 0) {
    lines.push('### Start-up (sidecar, default configuration)')
    lines.push('')
    lines.push('| sidecar | starts | start → listening, ms | start → ready (first token), ms | idle RSS, MiB |')
    lines.push('|---|---|---|---|---|')
    for (const name of sidecars) {
      const runs = res.startup.filter((r) => r.name === name)
      lines.push(`| ${name} | ${runs.length} | ${f(median(runs.map((r) => r.listeningMs)), 0)} | ${f(median(runs.map((r) => r.readyMs)), 0)} | ${f(median(runs.map((r) => r.idleRssMiB)))} |`)
    }
    lines.push('')
  }

  if (res.saturation.length > 0) {
    const sat = res.saturation
    lines.push(`### Saturation: small JSON GETs, ${String(o.connections)} keep-alive connections, wrk -t1, ${String(o.saturationS)} s × ${String(o.rounds)} rounds (medians)`)
    lines.push('')
    lines.push('| target | req/s | p50 ms | p90 ms | p99 ms | proxy CPU µs/req | proxy core busy µs/req | peak RSS MiB | upstream CPU µs/req | errors | other load on machine |')
    lines.push('|---|---|---|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      lines.push(`| ${n} | ${f(med(sat, n, (r) => r.rps), 0)} | ${f(med(sat, n, (r) => r.latencyMs.p50 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.latencyMs.p90 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.latencyMs.p99 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.proxyCpuPerReqUs))} | ${f(med(sat, n, (r) => r.proxyCoreBusyPerReqUs))} | ${f(Math.max(...sat.filter((r) => r.target === n).map((r) => r.peakRssMiB)))} | ${f(med(sat, n, (r) => r.upstreamCpuPerReqUs))} | ${sat.filter((r) => r.target === n).reduce((a, r) => a + r.errors, 0)} | ${f(med(sat, n, (r) => r.foreignCpuPct), 0)} % |`)
    }
    lines.push('')
  }

  if (res.rate.length > 0) {
    const rate = res.rate
    lines.push(`### Fixed rate: ${String(o.rate)} req/s evenly paced (open loop), ${String(o.rateS)} s × ${String(o.rounds)} rounds (medians; latency from the write of each request)`)
    lines.push('')
    lines.push('| target | achieved req/s | p50 ms | p90 ms | p99 ms | added p50 ms | added p90 ms | added p99 ms | p99 from intended send, ms | proxy CPU µs/req | peak RSS MiB | send lag p99 ms | errors |')
    lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      const added = (p: string): string => n === 'direct' ? '–' : f(addedOverDirect(rate, n, (r) => r.serviceMs[p] ?? NaN), 3)
      lines.push(`| ${n} | ${f(med(rate, n, (r) => r.achievedRate), 0)} | ${f(med(rate, n, (r) => r.serviceMs.p50 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.serviceMs.p90 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.serviceMs.p99 ?? NaN), 3)} | ${added('p50')} | ${added('p90')} | ${added('p99')} | ${f(med(rate, n, (r) => r.intendedMs.p99 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.proxyCpuPerReqUs))} | ${f(Math.max(...rate.filter((r) => r.target === n).map((r) => r.peakRssMiB)))} | ${f(med(rate, n, (r) => r.sendLagMs.p99 ?? NaN), 3)} | ${rate.filter((r) => r.target === n).reduce((a, r) => a + r.errors, 0)} |`)
    }
    lines.push('')
  }

  if (res.stream.length > 0) {
    const st = res.stream
    const mib = Math.round(Number(o.streamBytes) / MIB)
    lines.push(`### Streaming: one ${mib} MiB body each way, ${String(o.streamRounds)} rounds (medians; RSS rise = peak during the transfer − RSS before it)`)
    lines.push('')
    lines.push('| target | upload MiB/s | download MiB/s | RSS before MiB | RSS rise upload MiB | RSS rise download MiB | proxy CPU s per upload / download | failures |')
    lines.push('|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      const up = st.filter((r) => r.target === n && r.direction === 'upload')
      const down = st.filter((r) => r.target === n && r.direction === 'download')
      lines.push(`| ${n} | ${f(median(up.map((r) => r.mibPerS)), 0)} | ${f(median(down.map((r) => r.mibPerS)), 0)} | ${f(median([...up, ...down].map((r) => r.rssBeforeMiB)))} | ${f(Math.max(...up.map((r) => r.rssRiseMiB)))} | ${f(Math.max(...down.map((r) => r.rssRiseMiB)))} | ${f(median(up.map((r) => r.proxyCpuS)), 2)} / ${f(median(down.map((r) => r.proxyCpuS)), 2)} | ${[...up, ...down].filter((r) => !r.ok).length} |`)
    }
    lines.push('')
  }

  // Ratios and the issue's targets, for each sidecar.
  for (const s of sidecars) {
    lines.push(`### ${s}: ratios and the issue's targets`)
    lines.push('')
    lines.push('| measure | value | target | met |')
    lines.push('|---|---|---|---|')
    const row = (measure: string, value: string, target: string, met: boolean | undefined): void => {
      lines.push(`| ${measure} | ${value} | ${target} | ${met === undefined ? '–' : met ? 'met' : 'NOT met'} |`)
    }
    const sat = res.saturation
    if (sat.length > 0) {
      const cpuRatio = ratio(med(sat, s, (r) => r.proxyCpuPerReqUs), med(sat, 'nginx', (r) => r.proxyCpuPerReqUs))
      const coreRatio = ratio(med(sat, s, (r) => r.proxyCoreBusyPerReqUs), med(sat, 'nginx', (r) => r.proxyCoreBusyPerReqUs))
      const rpsRatio = ratio(med(sat, s, (r) => r.rps), med(sat, 'nginx', (r) => r.rps))
      row('CPU per request, sidecar / nginx (saturation, /proc/<pid>/stat)', fx(cpuRatio), '≤ 2.5 × (stretch 2 ×)', Number.isFinite(cpuRatio) ? cpuRatio <= 2.5 : undefined)
      row('CPU per request, sidecar / nginx (saturation, whole proxy core incl. softirq)', fx(coreRatio), '(context)', undefined)
      row('saturation throughput, sidecar / nginx', fx(rpsRatio), '≥ 0.6 ×', Number.isFinite(rpsRatio) ? rpsRatio >= 0.6 : undefined)
      row('saturation throughput, sidecar / direct', fx(ratio(med(sat, s, (r) => r.rps), med(sat, 'direct', (r) => r.rps))), '(context)', undefined)
      row('saturation p99, sidecar / nginx', fx(ratio(med(sat, s, (r) => r.latencyMs.p99 ?? NaN), med(sat, 'nginx', (r) => r.latencyMs.p99 ?? NaN))), '(context)', undefined)
    }
    const rate = res.rate
    if (rate.length > 0) {
      const a50 = addedOverDirect(rate, s, (r) => r.serviceMs.p50 ?? NaN)
      const a99 = addedOverDirect(rate, s, (r) => r.serviceMs.p99 ?? NaN)
      row(`added latency at ${String(o.rate)} req/s, p50`, `${f(a50, 3)} ms`, '≤ 0.5 ms', Number.isFinite(a50) ? a50 <= 0.5 : undefined)
      row(`added latency at ${String(o.rate)} req/s, p99`, `${f(a99, 3)} ms`, '≤ 1.5 ms', Number.isFinite(a99) ? a99 <= 1.5 : undefined)
      const rcpu = ratio(med(rate, s, (r) => r.proxyCpuPerReqUs), med(rate, 'nginx', (r) => r.proxyCpuPerReqUs))
      row(`CPU per request at ${String(o.rate)} req/s, sidecar / nginx`, fx(rcpu), '(context)', undefined)
    }
    const idle = median(res.startup.filter((r) => r.name === s).map((r) => r.idleRssMiB))
    if (Number.isFinite(idle)) row('idle RSS', `${f(idle)} MiB`, '≤ 60 MiB', idle <= 60)
    const load = Math.max(...[...res.saturation, ...res.rate].filter((r) => r.target === s).map((r) => r.peakRssMiB))
    if (Number.isFinite(load)) row('RSS under load (peak, saturation and fixed rate)', `${f(load)} MiB`, '≤ 120 MiB', load <= 120)
    const rise = Math.max(...res.stream.filter((r) => r.target === s).map((r) => r.rssRiseMiB))
    if (Number.isFinite(rise)) row(`RSS rise while streaming ${Math.round(Number(o.streamBytes) / MIB)} MiB (worst of up/down)`, `${f(rise)} MiB`, '< 50 MiB', rise < 50)
    const listen = median(res.startup.filter((r) => r.name === s).map((r) => r.listeningMs))
    if (Number.isFinite(listen)) row('start to listening', `${f(listen, 0)} ms`, '≤ 300 ms', listen <= 300)
    if (sidecars.length > 1 && s !== sidecars[0] && sat.length > 0) {
      const base = sidecars[0] as string
      const both = (runs: Array<SaturationRun | RateRun>, pick: (r: SaturationRun & RateRun) => number): string => {
        const p = pick as (r: SaturationRun | RateRun) => number
        return `${fx(ratio(med(runs, s, p), med(runs, base, p)))} (median of per-round ratios ${fx(pairedRatio(runs, s, base, p))})`
      }
      row(`CPU per request, ${s} / ${base} (saturation)`, both(sat, (r) => r.proxyCpuPerReqUs), '(A/B)', undefined)
      row(`throughput, ${s} / ${base} (saturation)`, both(sat, (r) => r.rps), '(A/B)', undefined)
      if (rate.length > 0) {
        row(`CPU per request, ${s} / ${base} (fixed rate)`, both(rate, (r) => r.proxyCpuPerReqUs), '(A/B)', undefined)
        row(`p99 latency, ${s} / ${base} (fixed rate)`, both(rate, (r) => r.serviceMs.p99 ?? NaN), '(A/B)', undefined)
      }
    }
    lines.push('')
  }
  return lines.join('\n')
}

// ---------------------------------------------------------------- main

function toolVersion (command: string, args: string[]): string | undefined {
  const r = spawnSync(command, args, { encoding: 'utf8' })
  if (r.error !== undefined) return undefined
  return (r.stdout + r.stderr).split('\n').find((l) => l.trim() !== '')?.trim()
}

async function main (): Promise<void> {
  const o = parseOptions(process.argv.slice(2))
  const runStarted = performance.now()

  // Nothing is installed here: say what is missing and stop.
  const wrkVersion = toolVersion('wrk', ['-v'])
  const nginxVersion = o.withNginx ? toolVersion('nginx', ['-v']) : 'nginx (not used)'
  const tasksetOk = !o.pin || toolVersion('taskset', ['-V']) !== undefined
  const missing = [
    wrkVersion === undefined ? 'wrk' : undefined,
    nginxVersion === undefined ? 'nginx' : undefined,
    tasksetOk ? undefined : 'util-linux (taskset)'
  ].filter((x) => x !== undefined)
  if (missing.length > 0) die(`missing: ${missing.join(', ')}. Install with: apt-get install -y wrk nginx`)
  for (const s of o.sidecars) {
    if (!existsSync(entryPoint(s.dir))) die(`${s.name}: ${entryPoint(s.dir)} not found: run npm run build there`)
  }
  const nodeVersions = new Map<string, string>()
  for (const node of new Set([o.node, ...o.sidecars.map((s) => s.node ?? o.node)])) {
    const version = toolVersion(nodeCommand(node)[0], ['--version'])
    if (version === undefined) die(`cannot run ${node}`)
    nodeVersions.set(node, version)
  }
  const sidecarNode = o.sidecars.map((s) => {
    const node = s.node ?? o.node
    return `${s.name} ${nodeVersions.get(node) ?? '?'}${nodeCommand(node)[1].map((f) => ` ${f}`).join('')}`
  }).join(', ')

  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19)
  const runDir = o.out ?? join(REPO, 'bench', 'results', `${o.smoke ? 'smoke-' : ''}${stamp}`)
  const logDir = join(runDir, 'logs')
  mkdirSync(logDir, { recursive: true })
  if (o.cpuProf !== undefined) for (const s of o.sidecars) mkdirSync(join(o.cpuProf, s.name), { recursive: true })

  const pin = o.pin && cpus().length >= 2
  // The orchestrator itself (it only samples /proc) shares the load generator's core.
  if (pin) spawnSync('taskset', ['-a', '-p', '-c', String(o.loadCore), String(process.pid)], { stdio: 'ignore' })
  const proxyCore = pin ? o.proxyCore : undefined
  const loadCore = pin ? o.loadCore : undefined
  log(`results in ${runDir}`)

  // Token endpoint (the stand-in) and the benchmark's upstream, on the load generator's core.
  const standInPort = await freePort()
  const standIn = launch('stand-in', process.execPath, [join(REPO, 'dist', 'main.js'), 'stand-in'], {
    env: { PATH: process.env.PATH, STAND_IN_PORT: String(standInPort), LOG_LEVEL: 'warn' },
    logDir,
    ...(loadCore === undefined ? {} : { core: loadCore })
  })
  await waitFor('the stand-in token endpoint', () => httpOk(`http://127.0.0.1:${standInPort}/healthz`), 15_000, 20)
  const upstreamPort = await freePort()
  const upstream = launch('upstream', process.execPath, [join(HERE, 'upstream.js'), String(upstreamPort)], {
    logDir, ...(loadCore === undefined ? {} : { core: loadCore })
  })
  await waitFor('the upstream', () => tcpAccepts(upstreamPort), 10_000, 10)
  const env: Env = { o, runDir, logDir, standInPort, upstreamPort, upstream, proxyCore, loadCore }

  const results: Results = {
    machine: {
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      memoryGiB: Math.round(totalmem() / 2 ** 30),
      kernel: toolVersion('uname', ['-r']),
      node: process.version,
      sidecarNode,
      nginx: nginxVersion,
      wrk: wrkVersion?.split(' [')[0],
      clkTck: CLK_TCK
    },
    options: {
      smoke: o.smoke,
      rounds: o.rounds,
      saturationS: o.saturationS,
      connections: o.connections,
      rate: o.rate,
      rateS: o.rateS,
      rateWarmupS: o.rateWarmupS,
      streamBytes: o.streamBytes,
      streamRounds: o.streamRounds,
      startups: o.startups,
      sidecars: o.sidecars,
      pinning: pin
        ? `proxies (sidecar, nginx master+worker) on core ${o.proxyCore}; load generator, upstream, token stand-in and this script on core ${o.loadCore}`
        : 'none',
      argv: process.argv.slice(2)
    },
    targets: [],
    startup: [],
    saturation: [],
    rate: [],
    stream: [],
    afterLoadRssMiB: {},
    discarded: []
  }

  // 1. Start-up and idle RSS, before anything else runs.
  if (o.workloads.has('startup')) {
    for (let i = 1; i <= o.startups; i++) {
      for (const s of o.sidecars) {
        const r = await startup(env, s.name, s.dir, s.node ?? o.node, i)
        results.startup.push(r)
        log(`startup ${s.name} #${i}: listening ${f(r.listeningMs, 0)} ms, ready ${f(r.readyMs, 0)} ms, idle RSS ${f(r.idleRssMiB)} MiB`)
      }
    }
  }

  // 2. The targets, all started once and left idle while another is measured.
  const targets: Target[] = []
  const running: Spawned[] = []
  if (o.withDirect) {
    targets.push({ name: 'direct', kind: 'direct', port: upstreamPort, headers: { Authorization: STATIC_AUTHORIZATION }, proc: undefined })
  }
  for (const s of o.sidecars) {
    const { target, process: p } = await startSidecar(env, s.name, s.dir, s.node ?? o.node)
    targets.push(target)
    running.push(p)
  }
  if (o.withNginx) {
    const { target, process: p } = await startNginx(env)
    targets.push(target)
    running.push(p)
  }
  await sleep(1000)
  for (const t of targets) {
    t.idleRssMiB = t.proc === undefined ? undefined : rssOf(t.proc)
    results.targets.push({ name: t.name, kind: t.kind, idleRssMiB: t.idleRssMiB })
  }

  const needsLoad = o.workloads.has('saturation') || o.workloads.has('rate')
  if (needsLoad) {
    // Warm-up (JIT, connection pools); not recorded.
    for (const t of targets) await wrk(env, t, o.warmupS, 0)
    log(`warmed up: ${targets.map((t) => t.name).join(', ')}`)
  }

  if (o.workloads.has('saturation')) {
    for (let round = 1; round <= o.rounds; round++) {
      for (const t of targets) {
        const r = await measured(env, results.discarded, () => wrk(env, t, o.saturationS, round))
        results.saturation.push(r)
        log(`saturation round ${round} ${t.name}: ${f(r.rps, 0)} req/s, p99 ${f(r.latencyMs.p99 ?? NaN, 2)} ms, proxy ${f(r.proxyCpuPerReqUs)} µs/req, RSS ${f(r.peakRssMiB)} MiB, errors ${r.errors}, other load ${f(r.foreignCpuPct, 0)} %`)
      }
    }
  }

  if (o.workloads.has('rate')) {
    for (let round = 1; round <= o.rounds; round++) {
      for (const t of targets) {
        const r = await measured(env, results.discarded, () => paced(env, t, round))
        results.rate.push(r)
        log(`rate round ${round} ${t.name}: ${f(r.achievedRate, 0)} req/s, p50 ${f(r.serviceMs.p50 ?? NaN, 3)} p99 ${f(r.serviceMs.p99 ?? NaN, 3)} ms, proxy ${f(r.proxyCpuPerReqUs)} µs/req, lag p99 ${f(r.sendLagMs.p99 ?? NaN, 2)} ms, errors ${r.errors}`)
      }
    }
  }

  if (o.workloads.has('stream')) {
    for (let round = 1; round <= o.streamRounds; round++) {
      for (const t of targets) {
        for (const direction of ['upload', 'download'] as const) {
          const quiet = await waitQuiet(env)
          const r = { ...await stream(env, t, direction, round), busyBeforePct: quiet }
          results.stream.push(r)
          log(`stream round ${round} ${t.name} ${direction}: ${f(r.mibPerS, 0)} MiB/s, RSS ${f(r.rssBeforeMiB)} → peak ${f(r.peakRssMiB)} MiB`)
        }
      }
    }
  }

  for (const t of targets) if (t.proc !== undefined) results.afterLoadRssMiB[t.name] = rssOf(t.proc)

  // Stop the targets; the sidecars exit through their SIGTERM path, which writes CPU profiles.
  for (const p of running) await stop(p)
  await stop(upstream)
  await stop(standIn)
  if (o.cpuProf !== undefined) results.profiles = o.cpuProf

  const table = report(results, targets)
  const elapsedS = (performance.now() - runStarted) / 1000
  writeFileSync(join(runDir, 'results.json'), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(join(runDir, 'results.md'), `command: ${['npm run bench --', ...process.argv.slice(2)].join(' ')}\n\n${table}\nrun took ${f(elapsedS, 0)} s\n`)
  process.stdout.write(`\n${table}\nrun took ${f(elapsedS, 0)} s; results in ${runDir}\n`)
  const failures = results.saturation.filter((r) => r.errors > 0).length + results.rate.filter((r) => r.errors > 0).length +
    results.stream.filter((r) => !r.ok).length
  if (failures > 0) {
    log(`${failures} run(s) had errors or failed transfers: see the tables and ${logDir}`)
    process.exitCode = 1
  }
}

await main().catch((err: unknown) => {
  log(`failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`)
  killAll()
  process.exit(1)
})
