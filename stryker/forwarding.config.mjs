import { area } from './base.mjs'

export default area('forwarding', {
  mutate: ['src/forward.ts', 'src/proxy.ts', 'src/http-rules.ts'],
  testFiles: [
    'test/http-rules.test.ts',
    'test/proxy.test.ts',
    'test/bodies.test.ts',
    'test/refusals.test.ts',
    'test/security.test.ts',
    'test/caller-abort.test.ts',
    'test/faults/upstream.test.ts',
    'test/faults/upstream-protocol.test.ts',
    'test/faults/early-answer.test.ts',
    'test/faults/queue-bound.test.ts',
    'test/faults/queue-gone.test.ts'
  ],
  // No floor until a full run has measured this area: then set it at the score it holds.
  breakAt: null
})
