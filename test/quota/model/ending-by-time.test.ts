// The quota guarantee against the model (model.test.ts) while holds end by time: each sidecar
// has a RATE_LIMIT_ALONE_MAX_MS of its own, small (its span: that + the longest window, 2 s),
// and every other one declares a size above the fleet's (a rollout raising it by one; in the
// last group a second one raising it by two, so an ended entry's size is the largest and must
// stay counted), so the count cannot release the one entry a restart or a cut leaves lapsed:
// time must. G1 (never
// over), G3 and the cool-downs are checked after every step; G2 is not (the larger size holds
// the absent shares by design, room the model does not see).
//   QUOTA_MODEL_SEED=<seed> QUOTA_MODEL_GROUP=<g> QUOTA_MODEL_PATH=<path> npx tap test/quota/model/ending-by-time.test.ts
import fc from 'fast-check'
import t from 'tap'
import { commitSeed } from '../../helpers/seed.js'
import { checkOptions } from './check-options.js'
import { runSchedule } from './run.js'
import { MODEL_FLEET, scheduleArb, scheduleSource, type Command, type FaultKind, type FleetConfig } from './schedule.js'

const SEED = commitSeed(process.env.QUOTA_MODEL_SEED, 20261202)
const ONLY_GROUP = process.env.QUOTA_MODEL_GROUP === undefined ? undefined : Number(process.env.QUOTA_MODEL_GROUP)
/** Each sidecar's bound on spending alone (ms), by its index: mixed, all far below the default. */
const ALONE_MAX_MS = [150, 1_500, 400]
/** The faults featured, and how far above the fleet's size the others declare (1 or 2: size + i mod 3). */
const GROUPS: Array<[FaultKind[], number]> = [[['restartSidecar', 'cut'], 1], [['stall', 'restartSidecar', 'down'], 1], [['restartSidecar', 'cut'], 2]]
const RUNS_PER_GROUP = 2
/** Room for two runs of a group on a busy machine: a group stopped before two fails. */
const GROUP_TIME_LIMIT_MS = Number(process.env.QUOTA_MODEL_TIME_LIMIT_MS ?? 90_000)

const configOf = (size: number, above: number): FleetConfig => ({
  size,
  ...MODEL_FLEET,
  sidecarEnv: (i) => ({ RATE_LIMIT_FLEET_SIZE: String(size + (i % (above + 1))), RATE_LIMIT_ALONE_MAX_MS: String(ALONE_MAX_MS[i % ALONE_MAX_MS.length]) }),
  judgeLiveness: false
})

t.setTimeout(Math.max(180_000, 5 * GROUP_TIME_LIMIT_MS))
t.jobs = 2

for (const [g, [featured, above]] of GROUPS.entries()) {
  if (ONLY_GROUP !== undefined && ONLY_GROUP !== g) continue
  t.test(`group ${g}: ${featured.join(', ')}; sizes up to +${above}`, async (t) => {
    const seed = SEED + g
    let runs = 0
    let lastTrace: string[] = []
    let lastSteps = 0
    const inputArb = fc.integer({ min: 2, max: 3 }).chain((size) => scheduleArb(size, featured).map((schedule) => ({ size, schedule })))
    const property = fc.asyncProperty(inputArb, async ({ size, schedule }) => {
      const report = await runSchedule(configOf(size, above), schedule, `t${g}r${runs++}`)
      if (report.violation === undefined) return
      lastTrace = report.trace
      lastSteps = report.steps
      throw new Error(`${report.violation.check}: ${report.violation.message}`)
    })
    const details = await fc.check(property, checkOptions(seed, RUNS_PER_GROUP, GROUP_TIME_LIMIT_MS))
    const replay = `QUOTA_MODEL_SEED=${SEED} QUOTA_MODEL_GROUP=${g} QUOTA_MODEL_PATH='${details.counterexamplePath ?? ''}' npx tap test/quota/model/ending-by-time.test.ts`
    if (details.failed && details.counterexample !== null) {
      const [input] = details.counterexample as [{ size: number, schedule: Command[] }]
      const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)
      t.fail(`the guarantee broke (seed ${seed}): ${error}`, { replay, size: input.size, schedule: scheduleSource(input.schedule.slice(0, lastSteps)), trace: lastTrace.join('\n') })
      return
    }
    t.ok(details.numRuns >= RUNS_PER_GROUP, `${details.numRuns} runs, seed ${seed}`, { replay })
  })
}
