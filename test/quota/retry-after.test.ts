// Reading the gateway's Retry-After and rate-limit fault (issue 14 §1), and the local Retry-After.
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
