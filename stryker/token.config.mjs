import { area } from './base.mjs'

export default area('token', {
  mutate: ['src/token/*.ts'],
  testFiles: [
    'test/token/*.test.ts',
    'test/faults/revocation.test.ts',
    'test/faults/token-endpoint.test.ts'
  ],
  breakAt: 85
})
