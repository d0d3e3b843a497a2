// Saturation: wrk -t1 -cN, small JSON GETs over keep-alive; a Lua done() hook prints
// wrk's figures as one JSON line.
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cpuResult, sample, snapshot, type CpuResult } from '../accounting.js'
import { runToEnd } from '../processes.js'
import { SMALL_PATH, type Env, type Target } from '../targets.js'

export const WRK_SCRIPT = `-- written by bench/run.ts: one JSON line with the run's figures
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests":%d,"durationUs":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyUs":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d,"mean":%.1f}}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean))
end
`

export interface WrkResult {
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
  /** Highest RssAnon sampled (every 100 ms): private memory. */
  peakRssAnonMiB: number
}

export async function wrk (env: Env, target: Target, seconds: number, round: number): Promise<SaturationRun> {
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
  const { peakRssMiB, peakRssAnonMiB, loadCpuS } = sampler.stop()
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
    peakRssAnonMiB,
    ...cpuResult(before, after, r.requests, loadCpuS)
  }
}
