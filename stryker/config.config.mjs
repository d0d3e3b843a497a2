import { area } from './base.mjs'

export default area('config', {
  mutate: ['src/config*.ts', 'src/config/**/*.ts'],
  // test/config/ holds only fast, in-process tests (none starts dist/main.js).
  testFiles: ['test/config/config.test.ts', 'test/config/*.test.ts', 'test/token/credentials.test.ts', 'test/token/secret-file.test.ts'],
  // The area holds 100 % (357 killed, 7 marked equivalent in the source): 98 is the highest
  // floor base.mjs allows (its `high` threshold is the floor + 2, and Stryker caps it at 100).
  breakAt: 98
})
