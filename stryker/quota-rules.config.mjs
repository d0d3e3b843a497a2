import { area } from './base.mjs'

// The quota guard's local logic: rules and settings, the in-process store and ledger, and
// what a 429 says. quota-fleet.config.mjs mutates the Redis half against the same tests;
// the two are split so each full run fits in an hour on two shared cores.
export default area('quota-rules', {
  mutate: [
    'src/config/rate-limit-rules.ts',
    'src/config/rate-limits.ts',
    'src/quota/store.ts',
    'src/quota/ledger.ts',
    'src/quota/retry-after.ts',
    'src/quota/apigee-fault.ts'
  ],
  // loading.test.ts is left out: it runs dist/main.js (which modules start-up loads), which
  // no mutant of src/ reaches.
  // The configuration's tests own RATE_LIMITS' and the Redis URL's errors; the read cache's
  // own rules tests own cache= and stale=.
  // grace-fields.test.ts holds a boundary of the fleet store's (quota-fleet's code) only.
  testFiles: [
    'test/quota/!(loading|grace-fields).test.ts',
    'test/quota/attacks/*.test.ts',
    'test/generative/quota.test.ts',
    'test/config/config.test.ts',
    'test/config/*.test.ts',
    'test/cache/rules.test.ts',
    'test/idempotency/rules.test.ts',
    'test/admin/status-switch.test.ts'
  ],
  // Measured 97.18 % (2026-11-24, after the first full run's survivors were killed or marked).
  breakAt: 95
})
