// What every generative test file shares: the seed and run counts, the fast-check
// run reported through tap, the sidecar between a recording token endpoint and a
// recording upstream, and the checks of metrics and logs across all runs.
import fc from 'fast-check'
import type { Test } from 'tap'
import { build, CLIENT_SECRET } from '../helpers/build.js'
import type { CallerResult } from '../helpers/caller.js'
import { eventually } from '../helpers/eventually.js'
import { asObject, createTally, delta, scrape, scrapeSettled, seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { commitSeed } from '../helpers/seed.js'

/** CI's seed comes from the commit, so each commit explores new cases; `FC_SEED=<n>` replays another (a failure prints its seed). */
export const SEED = commitSeed(process.env.FC_SEED, 20261123)
/** `FC_RUNS=<n>` runs every property n times (and lifts the time limits), for a long local hunt. */
const RUNS = process.env.FC_RUNS === undefined ? undefined : Number(process.env.FC_RUNS)

/**
 * The file's own time budget, told to the tap runner (over .taprc's 60 s: the
 * properties' time limits bound the runs; this is the safety net on a loaded
 * machine). Left alone for an FC_RUNS hunt, whose `--timeout` then applies.
 */
export function fileBudget (t: Test, ms = 120_000): void {
  if (RUNS === undefined) t.setTimeout(ms)
}

/** Counts of labelled runs: how often a property met the rare case it exists for. */
export function createLabels () {
  const counts = new Map<string, number>()
  return {
    counts,
    add (label: string): void { counts.set(label, (counts.get(label) ?? 0) + 1) }
  }
}
export type Labels = ReturnType<typeof createLabels>

export interface PropertyRuns {
  numRuns: number
  /** Bounds the shrinking of a failure, so a property that fails on today's code still fits the CI budget. */
  timeLimitMs: number
  /** Fewer runs than this (the runs were stopped at the safety time limit) fail the property. Default: numRuns. */
  minRuns?: number
  /** Each label must have been added at least this often across the runs. */
  atLeast?: { labels: Labels, counts: Record<string, number> }
}

/** At most this many batches of runs (each with the next seed) to meet a property's label floors. */
const MAX_BATCHES = 4

/**
 * Runs one property and reports it as one tap assertion: on failure, fast-check's
 * own report (seed, path, the shrunk counterexample and the error) is the message.
 *
 * The runs themselves are not cut short by `timeLimitMs` (a property stopped at a
 * time limit would pass having checked less than it says): they get a safety limit of
 * four times it, and fewer runs than `minRuns` fail. A failure is found without
 * shrinking, then replayed from its path and shrunk within `timeLimitMs`, so the
 * counterexample is the smallest found in that time.
 *
 * The seed changes with every commit, so whether `numRuns` runs meet each labelled case
 * often enough is luck: while a label is short, another batch of `numRuns` runs follows
 * with the next seed (SEED + 1, ...), up to MAX_BATCHES; only then does a short label fail.
 */
export async function checkProperty<Ts> (
  t: Test, name: string, property: fc.IAsyncPropertyWithHooks<Ts>, { numRuns, timeLimitMs, minRuns = numRuns, atLeast }: PropertyRuns
): Promise<boolean> {
  const runs = RUNS ?? numRuns
  const floor = RUNS === undefined ? minRuns : RUNS
  const started = performance.now()
  const short = (): Array<[string, number]> => atLeast === undefined
    ? []
    : Object.entries(atLeast.counts).filter(([label, n]) => (atLeast.labels.counts.get(label) ?? 0) < n)
  // An FC_RUNS hunt below the usual count runs once and checks no label floor.
  const labelled = runs >= numRuns
  let total = 0
  let batches = 0
  for (;;) {
    const seed = (SEED + batches) | 0
    batches += 1
    let details = await fc.check(property, {
      seed,
      numRuns: runs,
      endOnFailure: true,
      ...(process.env.FC_PATH === undefined || batches > 1 ? {} : { path: process.env.FC_PATH }),
      plugins: RUNS === undefined ? [fc.interruptAfterTimeLimit(4 * timeLimitMs)] : []
    })
    if (details.failed && details.counterexamplePath !== null) {
      // Shrunk from where it failed; a failure that does not happen again (a race) is
      // still reported, as first found.
      const shrunk = await fc.check(property, {
        seed: details.seed,
        path: details.counterexamplePath,
        plugins: RUNS === undefined ? [fc.interruptAfterTimeLimit(timeLimitMs)] : []
      })
      if (shrunk.failed) details = shrunk
    }
    if (details.failed) {
      const error = details.errorInstance
      t.fail(`${name}: property failed (seed ${details.seed}, path "${details.counterexamplePath ?? ''}")`, {
        seed: details.seed,
        path: details.counterexamplePath,
        counterexample: fc.stringify(details.counterexample),
        error: error instanceof Error ? error.message : String(error),
        shrunk: details.numShrinks,
        interrupted: details.interrupted,
        replay: `FC_SEED=${details.seed} FC_PATH='${details.counterexamplePath ?? ''}' npx tap ${t.fullname.split(' > ')[0] ?? ''}`
      })
      return false
    }
    total += details.numRuns
    if (details.numRuns < floor) {
      const elapsed = Math.round(performance.now() - started)
      t.fail(`${name}: only ${details.numRuns} of ${runs} runs within ${elapsed} ms (at least ${floor} must run)`, { seed })
      return false
    }
    if (!labelled || short().length === 0 || batches >= MAX_BATCHES) break
  }
  if (labelled && short().length > 0) {
    t.fail(`${name}: too few runs met the case the property is for`, {
      seed: SEED, batches, runs: total, wanted: atLeast?.counts, seen: Object.fromEntries(atLeast?.labels.counts ?? [])
    })
    return false
  }
  const seen = atLeast === undefined ? '' : `, ${[...atLeast.labels.counts].map(([label, n]) => `${label}: ${n}`).join(', ')}`
  t.pass(`${name} (${total} runs in ${batches} batch${batches === 1 ? '' : 'es'}, seed ${SEED}${seen})`)
  return true
}

export async function setup (t: Test, env: Record<string, string> = {}) {
  const tokenEndpoint = await startRecordingTokenEndpoint(t)
  const upstream = await startRecordingUpstream(t)
  // The generated answers include 429s and 500s: cool-downs (on by default) would turn
  // the requests after one into local 429s. Quota cases turn them back on through `env`.
  const sidecar = await build(t, { AUTH_URL: tokenEndpoint.url, UPSTREAM_URL: upstream.url, ACCESS_LOG: 'true', RATE_LIMIT_COOLDOWN_MS: '0', ...env })
  const requests = createTally()
  const errors = createTally()
  let before: Samples | undefined
  const counted = async (t: Test, noneInFlight: boolean): Promise<boolean> => {
    const expected = [...requests.counts.values()].reduce((a, b) => a + b, 0)
    const label = `the sidecar has counted all ${expected} requests made${noneInFlight ? ' and has none in flight' : ''}`
    return await eventually(t, label, async () => {
      const now = await scrape(sidecar.adminUrl)
      const total = [...delta(before ?? new Map(), now, 'store_auth_proxy_requests_total').values()].reduce((a, b) => a + b, 0)
      return total >= expected && (!noneInFlight || (now.get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 0)
    })
  }
  return {
    ...sidecar,
    tokenEndpoint,
    upstream,
    /** What the callers saw, as the metrics must count it (common.md's names and labels). */
    expect: {
      request (method: string, statusClass: string, outcome: 'completed' | 'aborted' | 'truncated') {
        requests.add('store_auth_proxy_requests_total', { method, status_class: statusClass, outcome })
      },
      error (code: string) { errors.add('store_auth_proxy_errors_total', { code }) }
    },
    /** Call before the first request. */
    async baseline () { before = await scrapeSettled(sidecar.adminUrl) },
    /**
     * Waits until the sidecar has counted every request the callers made so far (as
     * `expect.request` told it) and none is in flight: from then on, nothing more of
     * those requests goes upstream.
     */
    async settled (t: Test): Promise<boolean> {
      return await counted(t, true)
    },
    /** Waits until the sidecar has counted every request the callers made so far; others may still be in flight. */
    async counted (t: Test): Promise<boolean> {
      return await counted(t, false)
    },
    /** The counters grew exactly as the callers' experience says. */
    async checkMetrics (t: Test) {
      const after = await scrapeSettled(sidecar.adminUrl)
      const base = before ?? new Map()
      t.same(asObject(delta(base, after, 'store_auth_proxy_requests_total')), asObject(requests.counts),
        'store_auth_proxy_requests_total{method,status_class,outcome} counts what callers saw')
      t.same(asObject(delta(base, after, 'store_auth_proxy_errors_total')), asObject(errors.counts),
        'store_auth_proxy_errors_total{code} counts the answers the sidecar made')
    },
    /**
     * Every request counted exactly once, by method. For concurrent callers that give up
     * or upload while the upstream answers early, the caller's view and the sidecar's can
     * differ in the instant an answer races a close (README, Generative tests); the exact
     * status class and outcome are checked by the single-behaviour files.
     */
    async checkMetricTotals (t: Test) {
      const after = await scrapeSettled(sidecar.adminUrl)
      const byMethod = (series: Map<string, number>): Record<string, number> => {
        const totals: Record<string, number> = {}
        for (const [key, n] of series) {
          const method = /method="([^"]*)"/.exec(key)?.[1] ?? ''
          totals[method] = (totals[method] ?? 0) + n
        }
        return totals
      }
      t.same(byMethod(delta(before ?? new Map(), after, 'store_auth_proxy_requests_total')), byMethod(requests.counts),
        'store_auth_proxy_requests_total counts every request once, by method')
    },
    /** No token or secret in any log line; nothing a caller or an upstream does is an ERROR. */
    checkLogs (t: Test) {
      const secrets = [CLIENT_SECRET, ...tokenEndpoint.issued]
      const leaking = sidecar.logs.lines.filter((line) => secrets.some((s) => line.includes(s)))
      t.same(leaking, [], `no log line holds the client secret or one of the ${tokenEndpoint.issued.length} tokens issued`)
      const errorLines = sidecar.logs.entries().filter((e) => Number(e.level) >= 50)
      t.same(errorLines.map((e) => ({ msg: e.msg, err: (e.err as { message?: string } | undefined)?.message })), [],
        'no ERROR line for what callers and upstreams do')
    }
  }
}

export type Setup = Awaited<ReturnType<typeof setup>>

export function statusClass (status: number | undefined): string {
  return status === undefined ? 'none' : `${Math.floor(status / 100)}xx`
}

/** A short account of a caller's result, for assertion messages. */
export function describe (r: CallerResult): string {
  return `status ${r.status ?? 'none'}, ${r.body.length} bytes, ${r.complete ? 'complete' : 'incomplete'}` +
    `${r.aborted ? ', aborted by the caller' : ''}${r.error === undefined ? '' : `, error ${r.error}`}, ${Math.round(r.elapsedMs)} ms`
}

/** The JSON error body of an answer the sidecar made itself, or undefined. */
export function ownError (r: CallerResult): { error: string, message: string } | undefined {
  try {
    const parsed = JSON.parse(r.body.toString('utf8')) as { error?: unknown, message?: unknown }
    if (typeof parsed.error === 'string' && typeof parsed.message === 'string' && /^[A-Z_]+$/.test(parsed.error)) {
      return { error: parsed.error, message: parsed.message }
    }
  } catch {}
  return undefined
}

let counter = 0
/** A request id unique in this process. */
export function nextId (prefix: string): string {
  counter += 1
  return `${prefix}-${counter}`
}
