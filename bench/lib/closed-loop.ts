// A closed-loop client in the harness's own process: `concurrency` callers over keep-alive
// connections (undici's Pool), each sending its next GET as soon as the last answer's body
// has arrived. Latency is from the request to the body's last byte, as the caller sees it.
// Every answer is handed to `check` whole (status, headers, body), after its time is taken.
import { Pool } from 'undici'
import { percentile } from './stats.js'

export interface Answer {
  statusCode: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

export interface ClosedLoopRun {
  requests: number
  seconds: number
  rps: number
  p50Ms: number
  p99Ms: number
  /** Answers `check` rejected (a wrong status, header or body), and the first reason. */
  failures: number
  firstFailure?: string
}

export interface ClosedLoopOptions {
  origin: string
  /** The path of the n-th request (0, 1, 2, …, across every caller). */
  path: (n: number) => string
  seconds: number
  concurrency: number
  /** Why an answer is wrong, or undefined. */
  check: (answer: Answer) => string | undefined
}

export async function closedLoop ({ origin, path, seconds, concurrency, check }: ClosedLoopOptions): Promise<ClosedLoopRun> {
  const pool = new Pool(origin, { connections: concurrency })
  const latencies: number[] = []
  let failures = 0
  let firstFailure: string | undefined
  let n = 0
  const started = performance.now()
  const until = started + seconds * 1000
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < until) {
      const t0 = performance.now()
      let wrong: string | undefined
      try {
        const { statusCode, headers, body } = await pool.request({ method: 'GET', path: path(n++) })
        const bytes = Buffer.from(await body.arrayBuffer())
        latencies.push(performance.now() - t0)
        wrong = check({ statusCode, headers, body: bytes })
      } catch (err) {
        wrong = err instanceof Error ? err.message : String(err)
      }
      if (wrong !== undefined) {
        failures += 1
        firstFailure ??= wrong
      }
    }
  }))
  const elapsed = (performance.now() - started) / 1000
  await pool.close()
  latencies.sort((a, b) => a - b)
  return {
    requests: latencies.length,
    seconds: elapsed,
    rps: latencies.length / elapsed,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    failures,
    ...(firstFailure === undefined ? {} : { firstFailure })
  }
}
