// results.md of bench/cache.ts: per body and concurrency, the medians of each variant, then
// each hit against the miss measured next to it (median of per-round differences and
// ratios), and the sidecars' memory before and after.
import type { ClosedLoopRun } from './closed-loop.js'
import { pairedRatio } from './report.js'
import { f, fx, median } from './stats.js'

export interface CacheRun extends ClosedLoopRun {
  target: string
  body: 'catalog' | 'small'
  concurrency: number
  round: number
  sidecarCpuUs: number
  standInCpuUs: number
  redisCpuUs: number
  /** Busy time of the machine not spent by any process of the run: the other sessions on it. */
  otherLoadPct: number
}

export interface SidecarMemory {
  name: string
  rssMiB: number
  rssAnonMiB: number
  /** What its read cache holds in memory (/status). */
  cacheBytes: number
  cacheEntries: number
  /** Its cache_* counters (/metrics). */
  counters: string[]
}

/** Callers at once on a sidecar just started, the catalog in Redis (bench/cache.ts --burst). */
export interface BurstRun {
  callers: number
  ms: number
  /** How many got each answer: status and Cache-Status (its ttl left out). */
  outcomes: Record<string, number>
  /** GETs of entries and budget checks (EVALSHA) Redis served meanwhile. */
  redisGets: number
  budgetChecks: number
  counters: string[]
}

export interface CacheResults {
  machine: Record<string, unknown>
  options: Record<string, unknown>
  bodies: Record<string, number>
  runs: CacheRun[]
  idle: SidecarMemory[]
  end: SidecarMemory[]
  burst?: BurstRun
}

/** Per round, a's figure minus b's; the median of those differences. */
function pairedDifference (runs: CacheRun[], a: string, b: string, pick: (r: CacheRun) => number): number {
  const diffs: number[] = []
  for (const r of runs.filter((x) => x.target === a)) {
    const other = runs.find((x) => x.target === b && x.round === r.round)
    if (other !== undefined) diffs.push(pick(r) - pick(other))
  }
  return median(diffs)
}

function group (runs: CacheRun[], lines: string[]): void {
  const names = [...new Set(runs.map((r) => r.target))]
  const med = (name: string, pick: (r: CacheRun) => number): number => median(runs.filter((r) => r.target === name).map(pick))
  lines.push('| variant | req/s | p50 ms | p99 ms | sidecar CPU µs/req | stand-in CPU µs/req | redis CPU µs/req | other load % | requests | answers not as promised |')
  lines.push('|---|---|---|---|---|---|---|---|---|---|')
  for (const n of names) {
    const mine = runs.filter((r) => r.target === n)
    lines.push(`| ${n} | ${f(med(n, (r) => r.rps), 0)} | ${f(med(n, (r) => r.p50Ms), 3)} | ${f(med(n, (r) => r.p99Ms), 3)} | ` +
      `${f(med(n, (r) => r.sidecarCpuUs))} | ${f(med(n, (r) => r.standInCpuUs))} | ${f(med(n, (r) => r.redisCpuUs))} | ` +
      `${f(med(n, (r) => r.otherLoadPct), 0)} | ${mine.reduce((a, r) => a + r.requests, 0)} | ${mine.reduce((a, r) => a + r.failures, 0)} |`)
  }
  lines.push('')
  lines.push('| against the miss, same round (median) | p50 added ms | p99 added ms | sidecar CPU per request | req/s |')
  lines.push('|---|---|---|---|---|')
  for (const n of names.filter((x) => x !== 'miss')) {
    lines.push(`| ${n} | ${f(pairedDifference(runs, n, 'miss', (r) => r.p50Ms), 3)} | ${f(pairedDifference(runs, n, 'miss', (r) => r.p99Ms), 3)} | ` +
      `${fx(pairedRatio(runs, n, 'miss', (r) => r.sidecarCpuUs))} (${f(pairedDifference(runs, n, 'miss', (r) => r.sidecarCpuUs))} µs) | ` +
      `${fx(pairedRatio(runs, n, 'miss', (r) => r.rps))} |`)
  }
  lines.push('')
  lines.push(`sidecar CPU µs/req per round: ${names.map((n) => `${n} ${runs.filter((r) => r.target === n).map((r) => f(r.sidecarCpuUs)).join(', ')}`).join('; ')}`)
  lines.push('')
}

export function cacheReport (res: CacheResults): string {
  const lines: string[] = []
  const m = res.machine
  lines.push(`machine: ${String(m.cpu)}, ${String(m.cores)} cores, node ${String(m.node)}, ${String(m.redis)}`)
  lines.push(`pinning: ${String(res.options.pinning)}; ${String(res.options.rounds)} rounds of ${String(res.options.seconds)} s per variant`)
  lines.push('')
  for (const body of ['catalog', 'small'] as const) {
    for (const c of [...new Set(res.runs.filter((r) => r.body === body).map((r) => r.concurrency))]) {
      lines.push(`### ${body} (${res.bodies[body] ?? '?'} bytes), ${c} connection${c === 1 ? '' : 's'}`)
      lines.push('')
      group(res.runs.filter((r) => r.body === body && r.concurrency === c), lines)
    }
  }
  lines.push('### the sidecars\' memory, idle after start and at the end')
  lines.push('')
  lines.push('| sidecar | idle RSS (private) MiB | end RSS (private) MiB | read cache in memory at the end |')
  lines.push('|---|---|---|---|')
  for (const e of res.end) {
    const i = res.idle.find((x) => x.name === e.name)
    lines.push(`| ${e.name} | ${f(i?.rssMiB ?? NaN)} (${f(i?.rssAnonMiB ?? NaN)}) | ${f(e.rssMiB)} (${f(e.rssAnonMiB)}) | ` +
      `${f(e.cacheBytes / 2 ** 20, 2)} MiB, ${e.cacheEntries} entries |`)
  }
  lines.push('')
  for (const e of res.end) lines.push(`${e.name}: ${e.counters.length === 0 ? 'no cache counters' : e.counters.join(', ')}`)
  lines.push('')
  const b = res.burst
  if (b !== undefined) {
    lines.push(`### ${b.callers} callers at once on a sidecar just started, the catalog in Redis`)
    lines.push('')
    lines.push(`In ${f(b.ms, 0)} ms: ${Object.entries(b.outcomes).map(([answer, count]) => `${count} × \`${answer}\``).join(', ')}. ` +
      `Redis served ${b.redisGets} GETs and ${b.budgetChecks} budget checks meanwhile. Its counters: ${b.counters.join(', ')}`)
    lines.push('')
  }
  return lines.join('\n')
}
