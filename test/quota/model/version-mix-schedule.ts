// Schedules for holds-versions.test.ts: member ids of a fleet, each run by one process at a
// time on this version or the earlier one, cut off, back, crashed, leaving, restarted on
// either version (a rolling update, a rollback keeping STATE_DIR). Plain data, so a shrunk
// counterexample prints as a list to keep as a named test.
import fc from 'fast-check'

export type Version = 'earlier' | 'current'

export type MixStep =
  /** Member `m`, present, takes until Redis refuses. */
  | { op: 'burst', m: number }
  /** Time passing: the present beat, the cut off spend alone all they may. */
  | { op: 'wait', ms: number }
  /** `m`, present, cut off from Redis: alive, spending alone once it may. */
  | { op: 'cut', m: number }
  /** `m`, cut off, back: tells its sends alone again. */
  | { op: 'back', m: number }
  /** `m`'s process dies without leaving. */
  | { op: 'crash', m: number }
  /** `m`, present, stops and leaves. */
  | { op: 'leave', m: number }
  /**
   * `m`'s process (if alive, it dies) replaced by one on `version` under the same id, its
   * ledger (STATE_DIR) kept: a new run telling the sends it holds; `vouches`: read whole (this version only).
   */
  | { op: 'restart', m: number, version: Version, vouches: boolean }

export interface Mix {
  /** How many start; two ids more, so slots can change hands. */
  size: number
  /**
   * Each id's RATE_LIMIT_FLEET_SIZE: `size`, or one more (a rollout raising it), so the count
   * cannot release every entry a cut or a crash leaves lapsed: time must end some. At most the
   * largest of those running run at once (the guarantee's first assumption).
   */
  floors: number[]
  /** The version each id's first process runs (the last two ids start stopped). */
  versions: Version[]
  steps: MixStep[]
  /** Cut off members declaring fewer than run too (version-mix-run.ts mayCut: an open finding). */
  cutSmaller?: boolean
}

const versionArb = fc.constantFrom<Version>('earlier', 'current')

function stepArb (ids: number): fc.Arbitrary<MixStep> {
  const m = fc.integer({ min: 0, max: ids - 1 })
  return fc.oneof(
    { weight: 3, arbitrary: m.map((i): MixStep => ({ op: 'burst', m: i })) },
    // Long enough, often, for a span to end (RATE_LIMIT_ALONE_MAX_MS + W after a presence).
    { weight: 4, arbitrary: fc.integer({ min: 100, max: 2_500 }).map((ms): MixStep => ({ op: 'wait', ms })) },
    { weight: 3, arbitrary: m.map((i): MixStep => ({ op: 'cut', m: i })) },
    { weight: 1, arbitrary: m.map((i): MixStep => ({ op: 'back', m: i })) },
    { weight: 1, arbitrary: m.map((i): MixStep => ({ op: 'crash', m: i })) },
    { weight: 1, arbitrary: m.map((i): MixStep => ({ op: 'leave', m: i })) },
    { weight: 4, arbitrary: fc.record({ op: fc.constant('restart' as const), m, version: versionArb, vouches: fc.boolean() }) }
  )
}

export const mixArb: fc.Arbitrary<Mix> = fc.integer({ min: 2, max: 3 }).chain((size) => fc.record({
  size: fc.constant(size),
  floors: fc.array(fc.integer({ min: size, max: size + 1 }), { minLength: size + 2, maxLength: size + 2 }),
  versions: fc.array(versionArb, { minLength: size + 2, maxLength: size + 2 }),
  steps: fc.array(stepArb(size + 2), { minLength: 16, maxLength: 32 })
}))

/** The schedule as TypeScript, to keep as a named test. */
export const mixSource = (mix: Mix): string =>
  JSON.stringify(mix).replace(/"(\w+)":/g, '$1: ').replace(/"/g, '\'').replace(/,(?=\S)/g, ', ')
