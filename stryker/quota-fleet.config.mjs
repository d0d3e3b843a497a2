import { area } from './base.mjs'

// The quota guard's fleet half: the guard itself, the Redis store and its client.
// quota-rules.config.mjs mutates the local logic against the same tests.
export default area('quota-fleet', {
  mutate: [
    'src/quota/guard.ts',
    'src/quota/fleet-store.ts',
    'src/quota/redis-backend.ts',
    'src/quota/redis-client.ts'
  ],
  // loading.test.ts is left out: it runs dist/main.js (which modules start-up loads), which
  // no mutant of src/ reaches.
  testFiles: [
    'test/quota/!(loading).test.ts',
    'test/quota/attacks/*.test.ts',
    'test/generative/quota.test.ts'
  ],
  // Measured 59.21 % (2026-11-24, the first full run): the floor holds it there until the
  // survivors are killed. The fleet's own guarantees are tested mostly by test/quota/model/
  // (37 s of real Redis per surviving mutant: left out) and by test/fleet/, which runs dist/.
  breakAt: 55
})
