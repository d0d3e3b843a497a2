// Per-run accounting of a target: CPU (proxy, upstream, load generator, the machine's
// other load) from /proc before and after a run, and RSS sampled while it lasts.
import type { Env, Target } from './targets.js'
import { coreTicks, cpuOf, cpuSeconds, CLK_TCK, peakRssOf, rssAnonOf, rssOf } from './proc.js'

export interface Sampler {
  stop: () => { peakRssMiB: number, peakRssAnonMiB: number, loadCpuS: number }
}

/** Samples the proxy's RSS (and the load generator's CPU, which is gone once it exits) while a run lasts. */
export function sample (target: Target, loadPid: () => number | undefined, everyMs: number): Sampler {
  let peak = target.proc === undefined ? NaN : rssOf(target.proc)
  // The kernel keeps no high-water mark of RssAnon: its peak is the highest sample.
  let peakAnon = target.proc === undefined ? NaN : rssAnonOf(target.proc)
  let loadCpu = 0
  const timer = setInterval(() => {
    if (target.proc !== undefined) {
      peak = Math.max(peak, rssOf(target.proc))
      peakAnon = Math.max(peakAnon, rssAnonOf(target.proc))
    }
    const pid = loadPid()
    if (pid !== undefined) loadCpu = cpuSeconds(pid) ?? loadCpu
  }, everyMs)
  return {
    stop: () => {
      clearInterval(timer)
      return { peakRssMiB: target.proc === undefined ? NaN : Math.max(peak, peakRssOf(target.proc)), peakRssAnonMiB: peakAnon, loadCpuS: loadCpu }
    }
  }
}

export interface CpuSnapshot { proxy: number, upstream: number, self: number, coreBusy: number, machineBusy: number, machineTotal: number }

export function snapshot (env: Env, target: Target): CpuSnapshot {
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

export interface CpuResult {
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

export function cpuResult (a: CpuSnapshot, b: CpuSnapshot, requests: number, loadCpuS: number): CpuResult {
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
