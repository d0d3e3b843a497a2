import { area } from './base.mjs'

export default area('token', {
  mutate: ['src/token/*.ts'],
  testFiles: [
    'test/token/*.test.ts',
    'test/faults/revocation.test.ts',
    'test/faults/token-endpoint.test.ts'
  ],
  // 100 % on 2026-11-24 (every survivor of the first full run killed or marked with its reason):
  // the floor leaves room for a little new code, not for untested behaviour.
  breakAt: 95
})
