// A shared machine: wait for it to be quiet before a run, and repeat (bounded) a run
// that other processes disturbed. The discarded runs stay in results.json.
import { coreTicks } from './proc.js'
import { sleep } from './processes.js'
import { log } from './options.js'
import { f } from './stats.js'
import type { Env } from './targets.js'
import type { SaturationRun } from './workloads/saturation.js'
import type { RateRun } from './workloads/rate.js'

/**
 * On a shared machine, other work skews a run. Between runs every process of the
 * benchmark is idle, so whatever keeps the cores busy is someone else's: wait (bounded)
 * until it falls below quietPct, and return the share seen last.
 */
export async function waitQuiet (env: Env): Promise<number> {
  const until = performance.now() + env.o.quietWaitS * 1000
  let waited = false
  for (;;) {
    const a = coreTicks()
    await sleep(500)
    const b = coreTicks()
    const busy = b.reduce((x, c) => x + c.busy, 0) - a.reduce((x, c) => x + c.busy, 0)
    const total = b.reduce((x, c) => x + c.total, 0) - a.reduce((x, c) => x + c.total, 0)
    const pct = total > 0 ? busy / total * 100 : 0
    if (pct <= env.o.quietPct || performance.now() >= until) {
      if (waited) log(`  machine ${pct <= env.o.quietPct ? 'quiet' : 'still busy'}: ${f(pct, 0)} % busy`)
      return pct
    }
    if (!waited) log(`  machine busy (${f(pct, 0)} % by other processes): waiting up to ${env.o.quietWaitS} s`)
    waited = true
  }
}

/** Waits for a quiet machine, runs, and repeats (bounded) a run that others disturbed. */
export async function measured<T extends SaturationRun | RateRun> (
  env: Env, discarded: Array<SaturationRun | RateRun>, run: () => Promise<T>
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    const busyBeforePct = await waitQuiet(env)
    const r = { ...await run(), busyBeforePct }
    if (!(r.foreignCpuPct > env.o.noisyPct) || attempt >= env.o.retries) return r
    log(`  ${r.target} round ${r.round}: other processes used ${f(r.foreignCpuPct, 0)} % of the machine meanwhile: run repeated`)
    discarded.push(r)
  }
}
