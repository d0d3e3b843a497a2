import { area } from './base.mjs'

// The quota guard's fleet half: the guard itself, the Redis store and its client.
// quota-rules.config.mjs mutates the local logic against the same tests.
export default area('quota-fleet', {
  mutate: [
    'src/quota/guard.ts',
    'src/quota/fleet-store.ts',
    'src/quota/fleet-view.ts',
    'src/quota/fleet-alone.ts',
    'src/quota/fleet-conversation.ts',
    'src/quota/redis-backend.ts',
    'src/quota/redis-scripts.ts',
    'src/quota/redis-script-holds.ts',
    'src/redis/connection.ts'
  ],
  // loading.test.ts is left out: it runs dist/main.js (which modules start-up loads), which
  // no mutant of src/ reaches.
  testFiles: [
    'test/quota/!(loading).test.ts',
    'test/quota/attacks/*.test.ts',
    'test/generative/quota.test.ts',
    // src/redis/connection.ts's own tests (test/quota/redis-client.test.ts until src/ was
    // grouped by concern: the move left its 17 mutants to survive)
    'test/redis/*.test.ts'
  ],
  // 59.21 % in the first full run (2026-11-24); 100 % after the contract tests of the guard
  // (guard-contract), the Redis connection (redis-client), the Lua scripts (redis-scripts) and
  // the fleet store (fleet-alone, fleet-conversation), with 38 equivalent mutants marked.
  // The fleet's guarantee under faults is still tested by test/quota/model/ (37 s of real
  // Redis per mutant: left out) and test/fleet/ (runs dist/).
  breakAt: 95
})
