import { area } from './base.mjs'

export default area('config', {
  mutate: ['src/config*.ts', 'src/config/**/*.ts'],
  // test/config/ holds only fast, in-process tests (none starts dist/main.js).
  testFiles: ['test/config.test.ts', 'test/config/*.test.ts', 'test/token/credentials.test.ts', 'test/token/secret-file.test.ts'],
  // No floor until a full run has measured this area: then set it at the score it holds.
  breakAt: null
})
