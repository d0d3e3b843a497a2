import { area } from './base.mjs'

export default area('config', {
  // The settings' own files. The quota rules and their settings are mutated by
  // quota-rules.config.mjs; secret-file.ts and build-info.ts joined config/ when src/ was
  // grouped by concern and were never in an area (no committed report holds them).
  mutate: [
    'src/config/**/*.ts',
    '!src/config/rate-limit-rules.ts',
    '!src/config/rate-limits.ts',
    '!src/config/secret-file.ts',
    '!src/config/build-info.ts'
  ],
  // test/config/ holds only fast, in-process tests (none starts dist/main.js).
  // The settings of tracing (config/tracing.ts) and of orders (config/orders.ts) are tested
  // where their features are: those files, in-process too.
  testFiles: [
    'test/config/config.test.ts', 'test/config/*.test.ts', 'test/token/credentials.test.ts', 'test/token/secret-file.test.ts',
    'test/tracing/settings.test.ts', 'test/policy/policy.test.ts'
  ],
  // The area holds 100 % (357 killed, 7 marked equivalent in the source): 98 is the highest
  // floor base.mjs allows (its `high` threshold is the floor + 2, and Stryker caps it at 100).
  breakAt: 98
})
