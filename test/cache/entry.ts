// A stored answer for the pure tests of the read cache's entries (policy, layout, memory store).
import type { Entry } from '../../src/cache/entries.js'

export const entry = (over: Partial<Entry> = {}): Entry => ({
  status: 200,
  headers: { 'content-type': 'application/json', 'x-multi': ['a', 'b'] },
  body: Buffer.from('{"a":1}'),
  freshMs: 1000,
  staleMs: 500,
  initialAgeMs: 2000,
  vary: [['x-tenant', 'a']],
  rule: 'GET /r',
  display: '/r',
  uri: 'u',
  storedAt: 100,
  ...over
})
