// Fixed rate: the open-loop generator (bench/paced.ts) in its own process, at raised
// priority for every target alike; CPU counted over the measured part only.
import { join } from 'node:path'
import { cpuResult, sample, snapshot, type CpuResult, type CpuSnapshot } from '../accounting.js'
import { BENCH_DIR } from '../options.js'
import { setPriorityAll } from '../proc.js'
import { runToEnd } from '../processes.js'
import { SMALL_PATH, type Env, type Target } from '../targets.js'

export interface PacedResult {
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
  /** Highest RssAnon sampled (every 100 ms): private memory. */
  peakRssAnonMiB: number
}

export async function paced (env: Env, target: Target, round: number): Promise<RateRun> {
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
  const out = await runToEnd('paced', process.execPath, [join(BENCH_DIR, 'paced.js'), JSON.stringify(options)], env.logDir,
    (rateWarmupS + rateS + 30) * 1000, env.loadCore, (p) => { pid = p; if (env.o.rateNice !== 0) setPriorityAll(p, env.o.rateNice) })
  clearTimeout(warmupTimer)
  if (env.o.rateNice !== 0) for (const p of boosted) setPriorityAll(p, 0)
  const after = snapshot(env, target)
  const { peakRssMiB, peakRssAnonMiB, loadCpuS } = sampler.stop()
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
    peakRssAnonMiB,
    // The generator's CPU includes its warm-up: scaled to the measured share.
    ...cpuResult(before ?? after, after, r.requests, loadCpuS * rateS / (rateS + rateWarmupS))
  }
}
