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
  targets: Array<{ name: string, kind: string, idleRssMiB: number | undefined, idleRssAnonMiB: number | undefined }>
  startup: StartupRun[]
  saturation: SaturationRun[]
  rate: RateRun[]
  stream: StreamRun[]
  afterLoadRssMiB: Record<string, number>
  /** Private memory once every workload is over: the young generation has grown to its cap by then. */
  afterLoadRssAnonMiB: Record<string, number>
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
  const floors = targets.filter((t) => t.kind === 'floor').map((t) => t.name)
  const started = [...new Set(res.startup.map((r) => r.name))]
  const lines: string[] = []
  const o = res.options
  lines.push(`machine: ${String(res.machine.cpu)}, ${String(res.machine.cores)} cores, node ${String(res.machine.node)} (sidecars: ${String(res.machine.sidecarNode)}), ${String(res.machine.nginx)}, ${String(res.machine.wrk)}`)
  lines.push(`pinning: ${String(o.pinning)}`)
  lines.push('')

  if (res.startup.length > 0) {
    lines.push('### Start-up (sidecar, default configuration; floors for context, which hold no token)')
    lines.push('')
    lines.push('| sidecar | starts | start → listening, ms | start → ready (first token), ms | CPU to listening, ms | CPU to ready, ms | idle RSS, MiB | idle private (RssAnon), MiB |')
    lines.push('|---|---|---|---|---|---|---|---|')
    for (const name of started) {
      const runs = res.startup.filter((r) => r.name === name)
      const m = (pick: (r: StartupRun) => number, digits?: number): string => f(median(runs.map(pick)), digits)
      lines.push(`| ${name} | ${runs.length} | ${m((r) => r.listeningMs, 0)} | ${m((r) => r.readyMs, 0)} | ${m((r) => r.cpuToListeningMs, 0)} | ${m((r) => r.cpuToReadyMs, 0)} | ${m((r) => r.idleRssMiB)} | ${m((r) => r.idleRssAnonMiB)} |`)
    }
    lines.push('')
  }

  if (res.saturation.length > 0) {
    const sat = res.saturation
    lines.push(`### Saturation: small JSON GETs, ${String(o.connections)} keep-alive connections, wrk -t1, ${String(o.saturationS)} s × ${String(o.rounds)} rounds (medians)`)
    lines.push('')
    lines.push('| target | req/s | p50 ms | p90 ms | p99 ms | proxy CPU µs/req | proxy core busy µs/req | peak RSS MiB | peak private MiB | upstream CPU µs/req | errors | other load on machine |')
    lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      lines.push(`| ${n} | ${f(med(sat, n, (r) => r.rps), 0)} | ${f(med(sat, n, (r) => r.latencyMs.p50 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.latencyMs.p90 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.latencyMs.p99 ?? NaN), 2)} | ${f(med(sat, n, (r) => r.proxyCpuPerReqUs))} | ${f(med(sat, n, (r) => r.proxyCoreBusyPerReqUs))} | ${f(Math.max(...sat.filter((r) => r.target === n).map((r) => r.peakRssMiB)))} | ${f(Math.max(...sat.filter((r) => r.target === n).map((r) => r.peakRssAnonMiB)))} | ${f(med(sat, n, (r) => r.upstreamCpuPerReqUs))} | ${sat.filter((r) => r.target === n).reduce((a, r) => a + r.errors, 0)} | ${f(med(sat, n, (r) => r.foreignCpuPct), 0)} % |`)
    }
    lines.push('')
  }

  if (res.rate.length > 0) {
    const rate = res.rate
    lines.push(`### Fixed rate: ${String(o.rate)} req/s evenly paced (open loop), ${String(o.rateS)} s × ${String(o.rounds)} rounds (medians; latency from the write of each request)`)
    lines.push('')
    lines.push('| target | achieved req/s | p50 ms | p90 ms | p99 ms | added p50 ms | added p90 ms | added p99 ms | p99 from intended send, ms | proxy CPU µs/req | peak RSS MiB | peak private MiB | send lag p99 ms | errors |')
    lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      const added = (p: string): string => n === 'direct' ? '–' : f(addedOverDirect(rate, n, (r) => r.serviceMs[p] ?? NaN), 3)
      lines.push(`| ${n} | ${f(med(rate, n, (r) => r.achievedRate), 0)} | ${f(med(rate, n, (r) => r.serviceMs.p50 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.serviceMs.p90 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.serviceMs.p99 ?? NaN), 3)} | ${added('p50')} | ${added('p90')} | ${added('p99')} | ${f(med(rate, n, (r) => r.intendedMs.p99 ?? NaN), 3)} | ${f(med(rate, n, (r) => r.proxyCpuPerReqUs))} | ${f(Math.max(...rate.filter((r) => r.target === n).map((r) => r.peakRssMiB)))} | ${f(Math.max(...rate.filter((r) => r.target === n).map((r) => r.peakRssAnonMiB)))} | ${f(med(rate, n, (r) => r.sendLagMs.p99 ?? NaN), 3)} | ${rate.filter((r) => r.target === n).reduce((a, r) => a + r.errors, 0)} |`)
    }
    lines.push('')
  }

  if (res.stream.length > 0) {
    const st = res.stream
    const mib = Math.round(Number(o.streamBytes) / MIB)
    lines.push(`### Streaming: one ${mib} MiB body each way, ${String(o.streamRounds)} rounds (medians; RSS rise = peak during the transfer − RSS before it)`)
    lines.push('')
    lines.push('| target | upload MiB/s | download MiB/s | RSS before MiB | RSS rise upload MiB | RSS rise download MiB | private before MiB | private rise upload / download MiB | proxy CPU s per upload / download | failures |')
    lines.push('|---|---|---|---|---|---|---|---|---|---|')
    for (const n of names) {
      const up = st.filter((r) => r.target === n && r.direction === 'upload')
      const down = st.filter((r) => r.target === n && r.direction === 'download')
      lines.push(`| ${n} | ${f(median(up.map((r) => r.mibPerS)), 0)} | ${f(median(down.map((r) => r.mibPerS)), 0)} | ${f(median([...up, ...down].map((r) => r.rssBeforeMiB)))} | ${f(Math.max(...up.map((r) => r.rssRiseMiB)))} | ${f(Math.max(...down.map((r) => r.rssRiseMiB)))} | ${f(median([...up, ...down].map((r) => r.rssAnonBeforeMiB)))} | ${f(Math.max(...up.map((r) => r.rssAnonRiseMiB)))} / ${f(Math.max(...down.map((r) => r.rssAnonRiseMiB)))} | ${f(median(up.map((r) => r.proxyCpuS)), 2)} / ${f(median(down.map((r) => r.proxyCpuS)), 2)} | ${[...up, ...down].filter((r) => !r.ok).length} |`)
    }
    lines.push('')
  }

  // Ratios and the targets, for each sidecar: to the floors first, nginx as context.
  for (const s of sidecars) {
    lines.push(`### ${s}: ratios and the targets`)
    lines.push('')
    lines.push('| measure | value | target | met |')
    lines.push('|---|---|---|---|')
    const row = (measure: string, value: string, target: string, met: boolean | undefined): void => {
      lines.push(`| ${measure} | ${value} | ${target} | ${met === undefined ? '–' : met ? 'met' : 'NOT met'} |`)
    }
    const sat = res.saturation
    const rate = res.rate
    /** Both ratios: of the medians, and the median of per-round ratios (the one to trust here). */
    const both = <T extends SaturationRun | RateRun>(runs: T[], other: string, pick: (r: T) => number): [string, number] => {
      const paired = pairedRatio(runs, s, other, pick)
      return [`${fx(paired)} (ratio of medians ${fx(ratio(med(runs, s, pick), med(runs, other, pick)))})`, paired]
    }
    const floorTargets: Record<string, [number, string]> = { 'node-floor': [1.15, '≤ 1.15 ×'], 'fastify-floor': [0.6, '≤ 0.6 ×'] }
    for (const floor of floors) {
      const [limit, text] = floorTargets[floor] ?? [NaN, '(context)']
      if (sat.length > 0) {
        const [v, x] = both(sat, floor, (r) => r.proxyCpuPerReqUs)
        row(`CPU per request, ${s} / ${floor} (saturation)`, v, text, Number.isFinite(x) && Number.isFinite(limit) ? x <= limit : undefined)
      }
      if (rate.length > 0) row(`CPU per request, ${s} / ${floor} (${String(o.rate)} req/s)`, both(rate, floor, (r) => r.proxyCpuPerReqUs)[0], '(context)', undefined)
    }
    const idleAnon = median(res.startup.filter((r) => r.name === s).map((r) => r.idleRssAnonMiB))
    const idle = median(res.startup.filter((r) => r.name === s).map((r) => r.idleRssMiB))
    if (Number.isFinite(idleAnon)) row('private memory (RssAnon), idle after the first token', `${f(idleAnon)} MiB (RSS ${f(idle)} MiB)`, '≤ 25 MiB', idleAnon <= 25)
    const afterAnon = res.afterLoadRssAnonMiB[s]
    if (afterAnon !== undefined && (sat.length > 0 || rate.length > 0)) {
      row('private memory (RssAnon), idle after the workloads', `${f(afterAnon)} MiB (RSS ${f(res.afterLoadRssMiB[s] ?? NaN)} MiB)`, '(context)', undefined)
    }
    const satRuns = sat.filter((r) => r.target === s)
    const peak = Math.max(...satRuns.map((r) => r.peakRssMiB))
    if (satRuns.length > 0) row('RSS, peak under saturation', `${f(peak)} MiB (private ${f(Math.max(...satRuns.map((r) => r.peakRssAnonMiB)))} MiB)`, '≤ 100 MiB', peak <= 100)
    const listen = median(res.startup.filter((r) => r.name === s).map((r) => r.listeningMs))
    const ready = median(res.startup.filter((r) => r.name === s).map((r) => r.readyMs))
    if (Number.isFinite(listen)) row('start to listening', `${f(listen, 0)} ms`, '≤ 250 ms', listen <= 250)
    if (Number.isFinite(ready)) row('start to ready (first token)', `${f(ready, 0)} ms`, '≤ 250 ms', ready <= 250)
    const cpuReady = median(res.startup.filter((r) => r.name === s).map((r) => r.cpuToReadyMs))
    // The bundle is shipped only at or below this floor's start-up CPU, measured in the same run.
    const floorCpu = median(res.startup.filter((r) => r.name === 'fastify-floor').map((r) => r.cpuToReadyMs))
    if (Number.isFinite(cpuReady) && Number.isFinite(floorCpu)) {
      row('CPU to ready (utime + stime)', `${f(cpuReady, 0)} ms`, `≤ fastify-floor's ${f(floorCpu, 0)} ms`, cpuReady <= floorCpu)
    }
    if (rate.length > 0) {
      const a50 = addedOverDirect(rate, s, (r) => r.serviceMs.p50 ?? NaN)
      const a99 = addedOverDirect(rate, s, (r) => r.serviceMs.p99 ?? NaN)
      row(`added latency at ${String(o.rate)} req/s over direct, p50`, `${f(a50, 3)} ms`, '≤ 0.3 ms', Number.isFinite(a50) ? a50 <= 0.3 : undefined)
      row(`added latency at ${String(o.rate)} req/s over direct, p99`, `${f(a99, 3)} ms`, '≤ 1.0 ms', Number.isFinite(a99) ? a99 <= 1.0 : undefined)
    }
    if (sat.length > 0 && targets.some((t) => t.kind === 'nginx')) {
      row(`CPU per request, ${s} / nginx (saturation)`, both(sat, 'nginx', (r) => r.proxyCpuPerReqUs)[0], '(context)', undefined)
      row(`saturation throughput, ${s} / nginx`, both(sat, 'nginx', (r) => r.rps)[0], '(context)', undefined)
    }
    const rise = Math.max(...res.stream.filter((r) => r.target === s).map((r) => r.rssRiseMiB))
    const anonRise = Math.max(...res.stream.filter((r) => r.target === s).map((r) => r.rssAnonRiseMiB))
    if (Number.isFinite(rise)) row(`RSS rise while streaming ${Math.round(Number(o.streamBytes) / MIB)} MiB (worst of up/down)`, `${f(rise)} MiB (private ${f(anonRise)} MiB)`, '(context)', undefined)
    if (sidecars.length > 1 && s !== sidecars[0] && res.startup.length > 0) {
      const base = sidecars[0] as string
      const m = (name: string, pick: (r: StartupRun) => number): number => median(res.startup.filter((r) => r.name === name).map(pick))
      row(`start to listening, ${s} − ${base} (medians)`, `${f(m(s, (r) => r.listeningMs) - m(base, (r) => r.listeningMs), 0)} ms`, '(A/B)', undefined)
      row(`CPU to ready, ${s} − ${base} (medians)`, `${f(m(s, (r) => r.cpuToReadyMs) - m(base, (r) => r.cpuToReadyMs), 0)} ms`, '(A/B)', undefined)
      row(`idle private memory, ${s} − ${base} (medians)`, `${f(m(s, (r) => r.idleRssAnonMiB) - m(base, (r) => r.idleRssAnonMiB))} MiB`, '(A/B)', undefined)
    }
    if (sidecars.length > 1 && s !== sidecars[0] && sat.length > 0) {
      const base = sidecars[0] as string
      row(`CPU per request, ${s} / ${base} (saturation)`, both(sat, base, (r) => r.proxyCpuPerReqUs)[0], '(A/B)', undefined)
      row(`throughput, ${s} / ${base} (saturation)`, both(sat, base, (r) => r.rps)[0], '(A/B)', undefined)
      row(`peak RSS, ${s} / ${base} (saturation)`, both(sat, base, (r) => r.peakRssMiB)[0], '(A/B)', undefined)
      if (rate.length > 0) {
        row(`CPU per request, ${s} / ${base} (fixed rate)`, both(rate, base, (r) => r.proxyCpuPerReqUs)[0], '(A/B)', undefined)
        row(`p99 latency, ${s} / ${base} (fixed rate)`, both(rate, base, (r) => r.serviceMs.p99 ?? NaN)[0], '(A/B)', undefined)
      }
    }
    lines.push('')
  }
  return lines.join('\n')
}
