// The quota guarantee while members run this version and the earlier one side by side (a
// rolling update, a rollback keeping STATE_DIR: one member id on both, in turn), with holds
// that end by time: fast-check drives member doubles on one real Redis through takes, cuts,
// returns, crashes, leaves and restarts switching version, and version-mix-run.ts checks after
// every step that TI never receives more than N in any W. Script level (see that file): the
// sidecar cannot be given another version's scripts.
//   QUOTA_MODEL_SEED=<seed> QUOTA_MODEL_PATH=<path> npx tap test/quota/model/holds-versions.test.ts
// A counterexample's schedule goes to holds-versions-counterexamples.test.ts as printed.
import fc from 'fast-check'
import t from 'tap'
import { Redis } from 'ioredis'
import { commitSeed } from '../../helpers/seed.js'
import { startRedis } from '../../helpers/redis.js'
import { checkOptions } from './check-options.js'
import { runMix } from './version-mix-run.js'
import { mixArb, mixSource, type Mix } from './version-mix-schedule.js'

const SEED = commitSeed(process.env.QUOTA_MODEL_SEED, 20261202)
/** QUOTA_MODEL_RUNS explores further (on this machine a run takes 3–8 s). */
const RUNS = Number(process.env.QUOTA_MODEL_RUNS ?? 6)
/** Room for the runs on a busy machine: stopped before RUNS fails. */
const TIME_LIMIT_MS = Number(process.env.QUOTA_MODEL_TIME_LIMIT_MS ?? 120_000)

t.setTimeout(Math.max(180_000, 3 * TIME_LIMIT_MS))

t.test('this version beside the earlier one: never over N in any W', async (t) => {
  const server = await startRedis(t)
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  let runs = 0
  let lastTrace: string[] = []
  let lastSteps = 0
  const property = fc.asyncProperty(mixArb, async (mix) => {
    const report = await runMix(server.url, admin, mix, `mix${runs++}:`)
    if (report.violation === undefined) return
    lastTrace = report.trace
    lastSteps = report.steps
    throw new Error(report.violation)
  })
  const details = await fc.check(property, checkOptions(SEED, RUNS, TIME_LIMIT_MS))
  const replay = `QUOTA_MODEL_SEED=${SEED} QUOTA_MODEL_PATH='${details.counterexamplePath ?? ''}' npx tap test/quota/model/holds-versions.test.ts`
  if (details.failed && details.counterexample !== null) {
    const [mix] = details.counterexample as [Mix]
    const error = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)
    t.fail(`the guarantee broke (seed ${SEED}): ${error}`, { replay, mix: mixSource({ ...mix, steps: mix.steps.slice(0, lastSteps + 1) }), trace: lastTrace.join('\n') })
    return
  }
  t.ok(details.numRuns >= RUNS, `${details.numRuns} runs, seed ${SEED}`, { replay })
})
