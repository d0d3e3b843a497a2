// The same-run benchmark: one workload at a time, against every
// target in turn (A B C A B C ...), several rounds, medians and ratios.
//
//   npm run bench                      (builds src/ and bench/, then this file)
//   npm run bench -- --rounds 7 --saturation-s 8
//   npm run bench:smoke                every workload for about a second (CI)
//
// This file only wires the parts; each lives in bench/lib/ under its own name:
//   options.ts (the command line), processes.ts (spawning, pinning, stopping),
//   targets.ts (direct, sidecars and floors, nginx), accounting.ts (CPU and memory per run),
//   noise.ts (quiet-wait, other load, repeats), workloads/{startup,saturation,rate,stream}.ts,
//   report.ts (tables and ratios). See bench/README.md for the options and the results.
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync, existsSync } from 'node:fs'
import { cpus, totalmem } from 'node:os'
import { join } from 'node:path'
import { measured, waitQuiet } from './lib/noise.js'
import { BENCH_DIR, BUNDLE, die, log, parseOptions, REPO } from './lib/options.js'
import { CLK_TCK, rssAnonOf, rssOf } from './lib/proc.js'
import { httpOk, killAll, killChildrenOnExit, launch, sleep, stop, tcpAccepts, waitFor, freePort, type Spawned } from './lib/processes.js'
import { report, type Results } from './lib/report.js'
import { f } from './lib/stats.js'
import { entryPoint, fillCompileCache, nodeCommand, startNginx, startSidecar, STATIC_AUTHORIZATION, type Env, type Target } from './lib/targets.js'
import { paced, type RateRun } from './lib/workloads/rate.js'
import { wrk, type SaturationRun } from './lib/workloads/saturation.js'
import { startup } from './lib/workloads/startup.js'
import { stream } from './lib/workloads/stream.js'

killChildrenOnExit()

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
  // The bundle is built only when a target runs it (esbuild, a few seconds), as `npm run bundle` does.
  if (o.sidecars.some((s) => s.dir === BUNDLE)) {
    const built = spawnSync(process.execPath, [join(REPO, 'scripts', 'bundle.mjs')], { stdio: 'inherit' })
    if (built.status !== 0) die('npm run bundle failed: the bundle targets cannot run')
  }
  for (const s of [...o.sidecars, ...o.floors]) {
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
  if (o.cpuProf !== undefined) for (const s of [...o.sidecars, ...o.floors]) mkdirSync(join(o.cpuProf, s.name), { recursive: true })

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
  const upstream = launch('upstream', process.execPath, [join(BENCH_DIR, 'upstream.js'), String(upstreamPort)], {
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
      idleS: o.idleS,
      rewarmS: o.rewarmS,
      streamBytes: o.streamBytes,
      streamRounds: o.streamRounds,
      startups: o.startups,
      sidecars: o.sidecars,
      floors: o.floors,
      pinning: pin
        ? `proxies (sidecars, floors, nginx master+worker) on core ${o.proxyCore}; load generator, upstream, token stand-in and this script on core ${o.loadCore}`
        : 'none',
      argv: process.argv.slice(2)
    },
    targets: [],
    startup: [],
    saturation: [],
    rate: [],
    stream: [],
    afterLoadRssMiB: {},
    afterLoadRssAnonMiB: {},
    discarded: []
  }

  // 0. The compile cache of the bundle targets, filled once, by the first of them (one entry
  // per node binary, accepted whatever the flags), as an image build would.
  const cached = o.sidecars.find((s) => s.compileCache === true)
  if (cached !== undefined) fillCompileCache(env, cached.node ?? o.node, entryPoint(cached.dir))

  // 1. Start-up and idle RSS, before anything else runs.
  if (o.workloads.has('startup')) {
    for (let i = 1; i <= o.startups; i++) {
      for (const s of [...o.sidecars, ...o.floors]) {
        await waitQuiet(env)
        const r = await startup(env, s.name, s.dir, s.node ?? o.node, i, 'compileCache' in s && s.compileCache === true)
        results.startup.push(r)
        log(`startup ${s.name} #${i}: listening ${f(r.listeningMs, 0)} ms, ready ${f(r.readyMs, 0)} ms, CPU to ready ${f(r.cpuToReadyMs, 0)} ms, idle RSS ${f(r.idleRssMiB)} MiB (private ${f(r.idleRssAnonMiB)})`)
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
    const { target, process: p } = await startSidecar(env, s.name, s.dir, s.node ?? o.node, 'sidecar', s.compileCache === true)
    targets.push(target)
    running.push(p)
  }
  for (const s of o.floors) {
    const { target, process: p } = await startSidecar(env, s.name, s.dir, s.node, 'floor')
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
    t.idleRssAnonMiB = t.proc === undefined ? undefined : rssAnonOf(t.proc)
    results.targets.push({ name: t.name, kind: t.kind, idleRssMiB: t.idleRssMiB, idleRssAnonMiB: t.idleRssAnonMiB })
  }

  const needsLoad = o.workloads.has('saturation') || o.workloads.has('rate')
  if (needsLoad) {
    // Warm-up (JIT, connection pools); not recorded.
    for (const t of targets) await wrk(env, t, o.warmupS, 0)
    log(`warmed up: ${targets.map((t) => t.name).join(', ')}`)
  }

  /**
   * Each measured run of a target: --idle-s of rest, the wait for a quiet machine (measured()),
   * --rewarm-s of unrecorded load, then the run.
   */
  const measuredRun = async <T extends SaturationRun | RateRun>(t: Target, run: () => Promise<T>): Promise<T> => {
    if (o.idleS > 0) await sleep(o.idleS * 1000)
    return await measured(env, results.discarded, async () => {
      if (o.rewarmS > 0) await wrk(env, t, o.rewarmS, 0)
      return await run()
    })
  }

  if (o.workloads.has('saturation')) {
    for (let round = 1; round <= o.rounds; round++) {
      for (const t of targets) {
        const r = await measuredRun(t, () => wrk(env, t, o.saturationS, round))
        results.saturation.push(r)
        log(`saturation round ${round} ${t.name}: ${f(r.rps, 0)} req/s, p99 ${f(r.latencyMs.p99 ?? NaN, 2)} ms, proxy ${f(r.proxyCpuPerReqUs)} µs/req, RSS ${f(r.peakRssMiB)} MiB (private ${f(r.peakRssAnonMiB)}), errors ${r.errors}, other load ${f(r.foreignCpuPct, 0)} %`)
      }
    }
  }

  if (o.workloads.has('rate')) {
    for (let round = 1; round <= o.rounds; round++) {
      for (const t of targets) {
        const r = await measuredRun(t, () => paced(env, t, round))
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
          log(`stream round ${round} ${t.name} ${direction}: ${f(r.mibPerS, 0)} MiB/s, RSS ${f(r.rssBeforeMiB)} → peak ${f(r.peakRssMiB)} MiB, private ${f(r.rssAnonBeforeMiB)} → ${f(r.peakRssAnonMiB)} MiB`)
        }
      }
    }
  }

  for (const t of targets) {
    if (t.proc === undefined) continue
    results.afterLoadRssMiB[t.name] = rssOf(t.proc)
    results.afterLoadRssAnonMiB[t.name] = rssAnonOf(t.proc)
  }

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
