import { area } from './base.mjs'

// The read cache's pure parts (what may be stored, keys, lifetimes, the memory bound, flights,
// the fleet's claims against a scripted Redis)
// against their own fast tests; the parts that need sockets and Redis (read-cache.ts with
// shared-reads.ts and stored-answer.ts, fill.ts, cached-request.ts, redis-cache.ts) are held
// by test/cache/*, test/review-cache/* and the generative suites, too slow to run per mutant here.
export default area('cache', {
  mutate: ['src/cache/policy.ts', 'src/cache/entries.ts', 'src/cache/flights.ts', 'src/cache/fleet-fetch.ts'],
  testFiles: [
    'test/cache/policy.test.ts',
    'test/cache/flights.test.ts',
    'test/cache/flight-failures.test.ts',
    'test/cache/fleet-fetch.test.ts',
    'test/cache/fleet-claims-redis.test.ts',
    'test/cache/fleet-fetch-late-claim.test.ts',
    'test/cache/rules.test.ts',
    'test/cache/http-rules.test.ts',
    'test/cache/fleet-wait.test.ts',
    'test/cache/fleet-lease-end.test.ts',
    'test/cache/fleet-claims-edges.test.ts',
    'test/cache/memory-targets.test.ts',
    'test/cache/own-answer.test.ts',
    'test/cache/entry-cost.test.ts',
    'test/cache/purge.test.ts',
    'test/cache/memory-store-edges.test.ts'
  ],
  breakAt: 95
})
