import { area } from './base.mjs'

export default area('quota', {
  mutate: ['src/quota/**/*.ts'],
  testFiles: [
    'test/quota/*.test.ts',
    'test/quota/attacks/*.test.ts',
    'test/generative/quota.test.ts'
  ],
  breakAt: 85
})
