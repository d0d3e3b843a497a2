// loadUndici: npm undici loaded, and the global Headers its own (the lazy global of Node's copy
// deleted first; test/startup/loaded-modules.test.ts checks Node's copy is not loaded by serve).
import t from 'tap'
import { loadUndici } from '../../src/cli/undici-globals.js'

t.test('Headers is npm undici\'s afterwards, a WHATWG Headers as before', async (t) => {
  await loadUndici()
  const { Headers } = await import('undici')
  t.equal(globalThis.Headers, Headers)
  t.equal(new globalThis.Headers({ 'Content-Type': 'text/plain' }).get('content-type'), 'text/plain')
  t.notOk(Object.getOwnPropertyDescriptor(globalThis, 'Headers')?.enumerable, 'not enumerable, as Node defines it')
  // Idempotent: a second call keeps it.
  await loadUndici()
  t.equal(globalThis.Headers, Headers)
})
