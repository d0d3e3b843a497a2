// The edges of what a gateway's rate-limit answer says, and of the cool-downs it starts:
// which dates are HTTP-dates, which bodies are Apigee's fault, and the cool-down lengths at
// the exact end of a window and when a second answer asks for exactly what is left.
import { brotliCompressSync, gzipSync } from 'node:zlib'
import t from 'tap'
import { isRateLimitFault } from '../../src/quota/apigee-fault.js'
import { retryAfterMs } from '../../src/quota/retry-after.js'
import { createCooldowns } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'

const NOW = Date.parse('2026-11-23T12:00:00Z')

t.test('an HTTP-date starts with its day name: dates Date.parse reads that are not HTTP-dates are unusable', async (t) => {
  t.equal(retryAfterMs('Mon, 23 Nov 2026 12:00:20 GMT', NOW), 20_000)
  t.equal(retryAfterMs('23 Nov 2026 12:00:20 GMT', NOW), undefined, 'no day name')
  t.equal(retryAfterMs('Mo, 23 Nov 2026 12:00:20 GMT', NOW), undefined, 'a day name of two letters')
})

const XML_FAULT = '<fault><faultstring>Rate limit quota violation</faultstring><detail><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></fault>'

t.test('Apigee\'s XML fault in the shapes gateways write it, and what only looks like it', async (t) => {
  const yes: Array<[string, string]> = [
    ['<?xml version="1.0"?><fault><detail><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></fault>', 'a declaration with no space after it'],
    ['<?xml version="1.0"?>\n\n<fault><detail><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></fault>', 'a declaration and a blank line'],
    ['<fault><detail><reason>quota</reason><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></fault>', 'another element before the error code'],
    ['<fault><detail><errorcode> policies.ratelimit.QuotaViolation </errorcode></detail></fault>', 'spaces around the error code'],
    [`\n  ${XML_FAULT}\n`, 'blank lines and indentation around the document']
  ]
  const no: Array<[string, string]> = [
    [`<envelope>${XML_FAULT}</envelope>`, 'a fault that is not the root element'],
    [`${XML_FAULT}<extra/>`, 'an element after the fault'],
    ['<fault><detail><errorcode>policies.ratelimit.QuotaViolation</code></detail></fault>', 'an error code never closed']
  ]
  for (const [body, why] of yes) t.ok(isRateLimitFault(Buffer.from(body)), why)
  for (const [body, why] of no) t.notOk(isRateLimitFault(Buffer.from(body)), why)
})

t.test('Content-Encoding: read as the gateway may write it; identity is no encoding; an unknown coding is never guessed', async (t) => {
  const fault = Buffer.from(XML_FAULT)
  t.ok(isRateLimitFault(gzipSync(fault), 'GZIP'), 'case does not matter')
  t.ok(isRateLimitFault(gzipSync(fault), ' gzip '), 'nor spaces around it')
  t.ok(isRateLimitFault(fault, 'identity'), 'identity: the bytes as they are')
  t.notOk(isRateLimitFault(brotliCompressSync(fault), 'compress'), 'brotli bytes labelled with a coding the sidecar cannot decode')
})

t.test('cool-downs: a second answer asking for exactly what is left changes nothing, not even the backoff it remembers', async (t) => {
  const c = fakeClock()
  const cooldowns = createCooldowns(c.clock)
  const plain = { retryAfterMs: undefined, baseMs: 1000, maxMs: 60_000 }
  t.equal(cooldowns.start('r', plain), 1000)
  await c.tick(500)
  t.equal(cooldowns.start('r', { ...plain, retryAfterMs: 500 }), 500, 'what is left of the one under way')
  await c.tick(700)
  t.equal(cooldowns.start('r', plain), 2000, 'ended 200 ms ago, within its own 1000 ms: the backoff doubles the 1000 ms one')
})

t.test('cool-downs: the backoff forgets the last one exactly its own length after it ended', async (t) => {
  const c = fakeClock()
  const cooldowns = createCooldowns(c.clock)
  const plain = { retryAfterMs: undefined, baseMs: 1000, maxMs: 60_000 }
  t.equal(cooldowns.start('r', plain), 1000)
  await c.tick(1999)
  t.equal(cooldowns.start('r', plain), 2000, '999 ms after it ended: doubled')
  await c.tick(2000 + 2000)
  t.equal(cooldowns.start('r', plain), 1000, 'exactly 2000 ms after the 2000 ms one ended: the base again')
})

t.test('cool-downs: adopting one learned elsewhere lengthens only when it ends later', async (t) => {
  const c = fakeClock()
  const cooldowns = createCooldowns(c.clock)
  t.equal(cooldowns.adopt('r', 5000), true)
  t.equal(cooldowns.adopt('r', 5000), false, 'the same end: nothing lengthened')
  t.equal(cooldowns.adopt('r', 4000), false, 'an earlier end never shortens it')
  t.equal(cooldowns.adopt('r', 0), false)
  t.equal(cooldowns.left('r'), 5000)
})
