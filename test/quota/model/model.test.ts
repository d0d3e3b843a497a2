// The quota guarantee against a model: fast-check generates schedules of calls, Redis and
// network faults, heals and time passing for a fleet of 2–3 in-process sidecars sharing
// one real redis-server; after every step run.ts checks G1 (never over), G2 (liveness
// when healthy, refunds), G3 (every caller answered) and honoured cool-downs.
//
// Seeds: CI's comes from the commit (`git rev-parse HEAD`), so every commit explores new
// schedules and a failure replays from the printed seed and path:
//   QUOTA_MODEL_SEED=<seed> QUOTA_MODEL_GROUP=<g> QUOTA_MODEL_PATH=<path> npx tap test/quota/model/model.test.ts
// A failure prints the shrunk schedule as TypeScript for counterexamples.test.ts.
import fc from 'fast-check'
import t from 'tap'
import { commitSeed } from '../../helpers/seed.js'
import { checkOptions } from './check-options.js'
import { runSchedule, type RunReport } from './run.js'
import { FAULT_KINDS, MODEL_FLEET, scheduleArb, scheduleSource, type Command, type FaultKind } from './schedule.js'

/** The commit's first 32 bits, or QUOTA_MODEL_SEED. */
const SEED = commitSeed(process.env.QUOTA_MODEL_SEED, 20261124)
const ONLY_GROUP = process.env.QUOTA_MODEL_GROUP === undefined ? undefined : Number(process.env.QUOTA_MODEL_GROUP)

/**
 * Each property features a few fault kinds (each of its runs has them, among random
 * others), so the file's runs cover every kind whatever the seed.
 */
const GROUPS: FaultKind[][] = [
  ['freeze', 'restartEmpty', 'callerLeaves'],
  ['slow', 'restartWithData', 'ti429'],
  ['stall', 'cut', 'upstreamDown'],
  ['wrongPassword', 'restartSidecar', 'down']
]
const RUNS_PER_GROUP = 2
/** A property stopped by its time limit before this many runs fails: it did not test enough. */
const RUNS_FLOOR = 2
/**
 * Bounds a group, shrinking included, so the file stays within CI's budget when it fails;
 * QUOTA_MODEL_TIME_LIMIT_MS lifts it to shrink a replayed counterexample further.
 */
const GROUP_TIME_LIMIT_MS = Number(process.env.QUOTA_MODEL_TIME_LIMIT_MS ?? 35_000)
/** Calls that G2 held to be sent, over the file: fewer means the healthy state was never reached. */
const LIVENESS_FLOOR = 10
/** Calls the read cache answered fresh, over the file: fewer means the cache was never exercised. */
const CACHE_FLOOR = 3

t.setTimeout(Math.max(180_000, 5 * GROUP_TIME_LIMIT_MS))
// A run mostly waits (windows, quiet periods, heartbeats: about a tenth of it is CPU), and
// each has a fleet, a redis-server and ports of its own: the four groups run side by side
// (the file is among the last tap starts, so its length is the suite's tail). run.ts still
// excuses only the stalls its witness sees the machine take from a call or a Redis command.
t.jobs = 4

const seen = new Map<FaultKind, number>()
let livenessChecked = 0
let livenessLate = 0
let lateAnswers = 0
let recoveriesLate = 0
let runs = 0
let failures = 0
let cacheFresh = 0
let cacheStale = 0

for (const [g, featured] of GROUPS.entries()) {
  if (ONLY_GROUP !== undefined && ONLY_GROUP !== g) continue
  t.test(`group ${g}: ${featured.join(', ')}`, async (t) => {
    const seed = SEED + g
    const inputArb = fc.integer({ min: 2, max: 3 }).chain((size) => scheduleArb(size, featured).map((schedule) => ({ size, schedule })))
    /** The last failing run: when shrinking ends, the counterexample's. */
    let lastFailing: RunReport | undefined
    const property = fc.asyncProperty(inputArb, async ({ size, schedule }) => {
      const report = await runSchedule({ size, ...MODEL_FLEET }, schedule, `g${g}r${runs}`)
      runs += 1
      for (const kind of report.kinds) seen.set(kind, (seen.get(kind) ?? 0) + 1)
      livenessChecked += report.livenessChecked
      livenessLate += report.livenessLate
      lateAnswers += report.lateAnswers
      if (report.recoveryLate) recoveriesLate += 1
      cacheFresh += report.cacheFresh
      cacheStale += report.cacheStale
      if (report.violation !== undefined) lastFailing = report
      if (report.violation !== undefined) throw new Error(`${report.violation.check}: ${report.violation.message}`)
    })
    const details = await fc.check(property, checkOptions(seed, RUNS_PER_GROUP, GROUP_TIME_LIMIT_MS))
    const replay = `QUOTA_MODEL_SEED=${SEED} QUOTA_MODEL_GROUP=${g} QUOTA_MODEL_PATH='${details.counterexamplePath ?? ''}' npx tap test/quota/model/model.test.ts`
    if (details.failed && details.counterexample !== null) {
      failures += 1
      const [input] = details.counterexample as [{ size: number, schedule: Command[] }]
      const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)
      const trace = lastFailing?.trace.join('\n') ?? ''
      t.fail(`the guarantee broke (seed ${seed}, path ${details.counterexamplePath ?? ''}): ${error}`, {
        replay,
        shrunk: details.numShrinks,
        interrupted: details.interrupted,
        size: input.size,
        // Up to the step that broke the guarantee: the rest never ran.
        schedule: scheduleSource(input.schedule.slice(0, lastFailing?.steps)),
        trace
      })
      return
    }
    t.ok(details.numRuns >= RUNS_FLOOR, `${details.numRuns} runs (floor ${RUNS_FLOOR}), seed ${seed}${details.interrupted ? ', stopped at its time limit' : ''}`, { replay })
  })
}

// Not buffered: it runs after every group has ended.
t.test('the runs covered every fault kind and reached the healthy state', { buffered: false }, async (t) => {
  t.comment(`seed ${SEED}; ${runs} runs; G2 checked ${livenessChecked} calls (${livenessLate} more met a Redis command the machine made late); ${lateAnswers} answered late, the machine taking the excess; recovery not judged in ${recoveriesLate} (late Redis); read cache: ${cacheFresh} fresh, ${cacheStale} stale; faults: ${[...seen].map(([k, n]) => `${k} ${n}`).join(', ')}`)
  if (ONLY_GROUP !== undefined || failures > 0) {
    // A failed property stops its runs early; its failure is the finding.
    t.pass('coverage not judged: a single group replayed, or a property failed')
    return
  }
  t.same(FAULT_KINDS.filter((k) => (seen.get(k) ?? 0) === 0), [], 'every fault kind occurred in some run')
  t.ok(livenessChecked >= LIVENESS_FLOOR, `G2 held ${livenessChecked} calls to be sent (floor ${LIVENESS_FLOOR})`)
  t.ok(cacheFresh >= CACHE_FLOOR, `the read cache answered ${cacheFresh} calls, each checked to reach nobody (floor ${CACHE_FLOOR})`)
})
