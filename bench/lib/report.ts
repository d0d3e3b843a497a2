// results.md: the tables (medians per target), added latency over direct, ratios to
// nginx and between sidecars (median of per-round ratios), and the targets.
import { MIB } from './options.js'
import { f, fx, median, ratio } from './stats.js'
import type { Target } from './targets.js'
import type { RateRun } from './workloads/rate.js'
import type { SaturationRun } from './workloads/saturation.js'
import type { StartupRun } from './workloads/startup.js'
import type { StreamRun } from './workloads/stream.js'

export interface Results {
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

export function med<T> (runs: T[], target: string, pick: (r: T) => number): number {
  return median(runs.filter((r) => (r as { target: string }).target === target).map(pick))
}

/** Per round, target minus direct; the median of those differences. */
export function addedOverDirect (runs: RateRun[], target: string, pick: (r: RateRun) => number): number {
  const diffs: number[] = []
  for (const r of runs.filter((x) => x.target === target)) {
    const d = runs.find((x) => x.target === 'direct' && x.round === r.round)
    if (d !== undefined) diffs.push(pick(r) - pick(d))
  }
  return median(diffs)
}

/** Per round, a's figure over b's (measured next to each other); the median of those ratios. */
export function pairedRatio<T extends { target: string, round: number }> (runs: T[], a: string, b: string, pick: (r: T) => number): number {
  const ratios: number[] = []
  for (const r of runs.filter((x) => x.target === a)) {
    const other = runs.find((x) => x.target === b && x.round === r.round)
    if (other !== undefined) ratios.push(ratio(pick(r), pick(other)))
  }
  return median(ratios)
}

export function report (res: Results, targets: Target[]): string {
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

  // Ratios and the targets, for each sidecar.
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
