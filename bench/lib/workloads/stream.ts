// Streaming: one large body up or down through a target (bench/stream.ts checks every
// byte); the proxy's RSS before, its peak during the transfer, and its CPU.
import { join } from 'node:path'
import { sample } from '../accounting.js'
import { BENCH_DIR, log, MIB } from '../options.js'
import { cpuOf, resetPeakRssOf, rssAnonOf, rssOf } from '../proc.js'
import { runToEnd } from '../processes.js'
import type { Env, Target } from '../targets.js'

export interface StreamRun {
  round: number
  target: string
  direction: 'upload' | 'download'
  ok: boolean
  mibPerS: number
  rssBeforeMiB: number
  peakRssMiB: number
  rssRiseMiB: number
  rssAnonBeforeMiB: number
  peakRssAnonMiB: number
  rssAnonRiseMiB: number
  proxyCpuS: number
  busyBeforePct?: number
}

export async function stream (env: Env, target: Target, direction: 'upload' | 'download', round: number): Promise<StreamRun> {
  const bytes = env.o.streamBytes
  const rssBefore = target.proc === undefined ? NaN : rssOf(target.proc)
  const rssAnonBefore = target.proc === undefined ? NaN : rssAnonOf(target.proc)
  if (target.proc !== undefined) resetPeakRssOf(target.proc)
  const cpuBefore = target.proc === undefined ? NaN : cpuOf(target.proc)
  const sampler = sample(target, () => undefined, 20)
  const options = { base: `http://127.0.0.1:${target.port}`, direction, bytes, headers: target.headers }
  const out = await runToEnd('stream', process.execPath, [join(BENCH_DIR, 'stream.js'), JSON.stringify(options)], env.logDir,
    150_000, env.loadCore)
  const { peakRssMiB, peakRssAnonMiB } = sampler.stop()
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
    rssAnonBeforeMiB: rssAnonBefore,
    peakRssAnonMiB,
    rssAnonRiseMiB: peakRssAnonMiB - rssAnonBefore,
    proxyCpuS: cpuAfter - cpuBefore
  }
}
