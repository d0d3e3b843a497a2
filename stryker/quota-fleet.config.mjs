import { area } from './base.mjs'

export default area('quota', {
  mutate: ['src/quota/**/*.ts'],
  // loading.test.ts is left out: it runs dist/main.js (which modules start-up loads), which
  // no mutant of src/ reaches.
  testFiles: [
    'test/quota/!(loading).test.ts',
    'test/quota/attacks/*.test.ts',
    'test/generative/quota.test.ts'
  ],
  breakAt: 85
})
