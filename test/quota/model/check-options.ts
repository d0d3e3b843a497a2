// fast-check's options for a model property: the seed, a replayed path (QUOTA_MODEL_PATH), and
// a time limit (shrinking included) that keeps a file within CI's budget.
import fc from 'fast-check'

export const checkOptions = (seed: number, numRuns: number, timeLimitMs: number): fc.Parameters<unknown> => ({
  seed,
  numRuns,
  endOnFailure: false,
  ...(process.env.QUOTA_MODEL_PATH === undefined ? {} : { path: process.env.QUOTA_MODEL_PATH }),
  plugins: [fc.interruptAfterTimeLimit(timeLimitMs)]
})
