// Reading the gateway's Retry-After and rate-limit fault, and the local Retry-After.
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib'
import t from 'tap'
import { isRateLimitFault } from '../../src/quota/apigee-fault.js'
import { retryAfterMs, retryAfterSeconds } from '../../src/quota/retry-after.js'
import { nextCooldownMs } from '../../src/quota/store.js'

const NOW = Date.parse('2026-11-23T12:00:00Z')

t.test('Retry-After: delta-seconds or an HTTP-date; anything else is unusable', async (t) => {
  const cases: Array<[string | string[] | undefined, number | undefined]> = [
    ['5', 5000], ['0', undefined], [' 120 ', 120_000], [['7', '9'], 7000],
    ['Mon, 23 Nov 2026 12:00:30 GMT', 30_000], ['Monday, 23-Nov-26 12:01:00 GMT', 60_000], ['Mon Nov 23 12:00:10 2026', 10_000],
    ['Mon, 23 Nov 2026 11:59:00 GMT', undefined], ['soon', undefined], ['-5', undefined], ['1.5', undefined], ['', undefined], [undefined, undefined],
    ['2026-11-23T12:00:30Z', undefined]
  ]
  for (const [value, ms] of cases) t.equal(retryAfterMs(value, NOW), ms, JSON.stringify(value))
})

t.test('an HTTP-date Retry-After is measured against the answer\'s own Date: a skewed local clock changes nothing', async (t) => {
  const gateway = 'Mon, 23 Nov 2026 12:00:00 GMT'
  const in20s = 'Mon, 23 Nov 2026 12:00:20 GMT'
  for (const skewMs of [0, -3_600_000, 3_600_000, 40_000]) {
    t.equal(retryAfterMs(in20s, NOW + skewMs, gateway), 20_000, `local clock ${skewMs / 1000} s off`)
  }
  t.equal(retryAfterMs(in20s, NOW - 3_600_000), 3_620_000, 'without a Date, the local clock (an hour behind: an hour too long, then capped)')
  t.equal(retryAfterMs(in20s, NOW, 'not a date'), 20_000, 'an unusable Date: the local clock')
  t.equal(retryAfterMs(in20s, NOW, ['Mon, 23 Nov 2026 12:00:10 GMT', 'x']), 10_000, 'the first Date of several')
  t.equal(retryAfterMs(in20s, NOW, 'Mon, 23 Nov 2026 12:00:20 GMT'), undefined, 'a date not after the answer\'s Date is unusable')
  t.equal(retryAfterMs('30', NOW - 3_600_000, gateway), 30_000, 'delta-seconds need no clock')
})

t.test('the local Retry-After is the ceiling of the seconds left, at least 1', async (t) => {
  for (const [ms, s] of [[1, 1], [999, 1], [1000, 1], [1001, 2], [10_800_000, 10800], [0, 1]] as const) t.equal(retryAfterSeconds(ms), s, `${ms} ms`)
})

t.test('Apigee\'s rate-limit fault: fault.detail.errorcode starting policies.ratelimit.', async (t) => {
  const yes = ['{"fault":{"faultstring":"x","detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}}',
    '{"fault":{"detail":{"errorcode":"policies.ratelimit.SpikeArrestViolation"}}}']
  const no = ['{"fault":{"detail":{"errorcode":"steps.ratelimit.QuotaViolation"}}}', '{"errorcode":"policies.ratelimit.QuotaViolation"}',
    '{"fault":{"detail":{"errorcode":["policies.ratelimit.x"]}}}', 'policies.ratelimit.QuotaViolation', '', 'null',
    '{"fault":{"detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}']
  for (const body of yes) t.ok(isRateLimitFault(Buffer.from(body)), body)
  for (const body of no) t.notOk(isRateLimitFault(Buffer.from(body)), body)
})

t.test('Apigee\'s rate-limit fault in XML (what a caller asking for XML gets), and neither form compressed or not', async (t) => {
  const xml = [
    '<fault><faultstring>Rate limit quota violation. Quota limit  exceeded. Identifier : _default</faultstring><detail><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></fault>',
    '<?xml version="1.0" encoding="UTF-8"?>\n<fault>\n  <faultstring>Spike arrest violation. Allowed rate : 5ps</faultstring>\n  <detail>\n    <errorcode>policies.ratelimit.SpikeArrestViolation</errorcode>\n  </detail>\n</fault>\n'
  ]
  const notXml = [
    '<fault><faultstring>policies.ratelimit.QuotaViolation</faultstring><detail><errorcode>steps.oauth.v2.FailedToResolveAccessToken</errorcode></detail></fault>',
    '<error><detail><errorcode>policies.ratelimit.QuotaViolation</errorcode></detail></error>',
    '<fault><errorcode>policies.ratelimit.QuotaViolation</errorcode></fault>',
    '<html><body>policies.ratelimit.QuotaViolation</body></html>'
  ]
  for (const body of xml) t.ok(isRateLimitFault(Buffer.from(body)), body.slice(0, 60))
  for (const body of notXml) t.notOk(isRateLimitFault(Buffer.from(body)), body.slice(0, 60))
  const fault = Buffer.from(xml[0] ?? '')
  for (const [coding, compressed] of [['gzip', gzipSync(fault)], ['x-gzip', gzipSync(fault)], ['deflate', deflateSync(fault)], ['br', brotliCompressSync(fault)]] as const) {
    t.ok(isRateLimitFault(compressed, coding), `XML, ${coding}`)
    t.notOk(isRateLimitFault(compressed), `${coding} bytes read as identity: not recognised`)
  }
  t.notOk(isRateLimitFault(Buffer.from('not gzip'), 'gzip'), 'a body that does not decode')
  t.notOk(isRateLimitFault(fault, 'compress'), 'an unknown coding')
  const bomb = gzipSync(Buffer.concat([Buffer.from('{"fault":{"detail":{"errorcode":"policies.ratelimit.QuotaViolation"}},"pad":"'), Buffer.alloc(2 * 1024 * 1024, 'a'), Buffer.from('"}')]))
  t.notOk(isRateLimitFault(bomb, 'gzip'), 'more than 1 MiB decoded is not a fault (and is not decoded further)')
})

t.test('cool-down lengths: Retry-After capped, else the base doubling within the last one\'s length, capped', async (t) => {
  const request = (retryAfterMs?: number) => ({ retryAfterMs, baseMs: 1000, maxMs: 8000 })
  t.equal(nextCooldownMs(request(), 0, undefined), 1000)
  t.equal(nextCooldownMs(request(), 0, 1000), 2000)
  t.equal(nextCooldownMs(request(), 0, 8000), 8000)
  t.equal(nextCooldownMs(request(), 500, 1000), undefined, 'one under way stands')
  t.equal(nextCooldownMs(request(5000), 0, undefined), 5000)
  t.equal(nextCooldownMs(request(50_000), 0, undefined), 8000)
  t.equal(nextCooldownMs(request(5000), 6000, undefined), undefined, 'a longer one under way stands')
  t.equal(nextCooldownMs(request(5000), 1000, undefined), 5000, 'a longer Retry-After lengthens it')
})
