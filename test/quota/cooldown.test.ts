// Cool-downs on the gateway's word: a 429, or Apigee's 500 with a
// policies.ratelimit.* code, goes to its caller unchanged and cools down its scope.
import t from 'tap'
import { seriesKey } from '../helpers/metrics-scrape.js'
import { answer, quotaSidecar, rateLimited, SPIKE_ARREST_BODY } from './sidecar.js'

const RULES = 'GET /v2/store/products/catalog 100/1d; * /v2/store/orders/** 100/1s'
const ORDERS_RULE = '* /v2/store/orders/**'

t.test('a 429 passes unchanged and cools down its rule only, for its Retry-After', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: RULES })
  const tooMany = answer(429, [['Content-Type', 'application/json'], ['Retry-After', '5'], ['X-Apigee', 'yes']], SPIKE_ARREST_BODY)
  s.upstream.plan('first', { kind: 'answer', answer: tooMany })
  const first = await s.call('/v2/store/orders/1', 'first', 'POST')
  t.equal(first.status, 429)
  t.equal(first.body, SPIKE_ARREST_BODY, 'the gateway\'s own body')
  t.equal(first.headers['x-apigee'], 'yes')
  t.equal(first.headers['retry-after'], '5')

  await s.clock.tick(1000)
  const local = await s.call('/v2/store/orders/2', 'second')
  t.equal(local.status, 429)
  t.equal(local.headers['retry-after'], '4')
  t.equal(local.headers['content-type'], 'application/json; charset=utf-8')
  const body = JSON.parse(local.body) as { error: string, message: string }
  t.equal(body.error, 'UPSTREAM_RATE_LIMITED')
  t.match(body.message, ORDERS_RULE)
  t.match(body.message, 'cool-down')
  t.same(s.upstream.seen('second'), [], 'TI sees nothing during the cool-down')

  t.equal((await s.call('/v2/store/products/catalog', 'other-rule')).status, 200, 'another rule is not cooling down')
  t.equal((await s.call('/v2/store/products/x', 'no-rule')).status, 200, 'nor is the upstream scope')

  const status = await s.status()
  const rateLimits = status.rateLimits as { cooldowns: Array<{ rule: string, until: string }> }
  t.same(rateLimits.cooldowns.map((c) => c.rule), [ORDERS_RULE])
  t.equal(Date.parse(rateLimits.cooldowns[0]?.until ?? ''), s.clock.clock.wallNow() + 4000)
  let m = await s.metrics()
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_upstream_answers_total', { rule: ORDERS_RULE })), 1)
  t.equal(m.get(rateLimited(ORDERS_RULE, 'cooldown', 'refused')), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_cooldown_until_seconds', { rule: ORDERS_RULE })), Math.round((s.clock.clock.wallNow() + 4000) / 1000))

  await s.clock.tick(4000)
  t.equal((await s.call('/v2/store/orders/3', 'after')).status, 200, 'sent again once the cool-down ended')
  m = await s.metrics()
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_cooldown_until_seconds', { rule: ORDERS_RULE })), 0)
  t.same((await s.status()).rateLimits, {
    backend: 'memory',
    degraded: false,
    redis: null,
    fleet: null,
    aloneEnded: false,
    rules: [{ rule: 'GET /v2/store/products/catalog', limits: ['100/1d'], share: [100] }, { rule: ORDERS_RULE, limits: ['100/1s'], share: [100] }],
    cooldowns: []
  })
})

t.test('with no rules, a 429 cools down the whole upstream; an HTTP-date Retry-After counts too', async (t) => {
  const s = await quotaSidecar(t, {})
  const at = new Date(s.clock.clock.wallNow() + 30_000).toUTCString()
  s.upstream.plan('a', { kind: 'answer', answer: answer(429, [['Retry-After', at]], '') })
  t.equal((await s.call('/v2/store/anything', 'a')).status, 429)
  const local = await s.call('/v2/store/else', 'b', 'DELETE')
  t.equal(local.status, 429)
  t.equal(local.headers['retry-after'], '30')
  t.match(JSON.parse(local.body), { error: 'UPSTREAM_RATE_LIMITED', message: /the upstream is in a cool-down/ })
  await s.clock.tick(30_000)
  t.equal((await s.call('/v2/store/else', 'c')).status, 200)
  t.equal(s.upstream.received.length, 2)
})

t.test('without a usable Retry-After: RATE_LIMIT_COOLDOWN_MS, doubling on repeats within its length, capped', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMIT_COOLDOWN_MS: '1000', RATE_LIMIT_COOLDOWN_MAX_MS: '5000' })
  const plain = answer(429, [], 'slow down')
  const expected = [1, 2, 4, 5, 5]
  for (const [i, seconds] of expected.entries()) {
    s.upstream.plan(`r${i}`, { kind: 'answer', answer: i === 1 ? answer(429, [['Retry-After', 'soon']], '') : plain })
    t.equal((await s.call('/v2/store/x', `r${i}`)).status, 429)
    t.equal((await s.call('/v2/store/x', `local${i}`)).headers['retry-after'], String(seconds), `repeat ${i + 1}: ${seconds} s`)
    // The repeat comes right after the cool-down ended: within its length.
    await s.clock.tick(seconds * 1000)
  }
  // A rate-limit answer long after the last cool-down ended starts again from the base.
  await s.clock.tick(60_000)
  s.upstream.plan('fresh', { kind: 'answer', answer: plain })
  await s.call('/v2/store/x', 'fresh')
  t.equal((await s.call('/v2/store/x', 'local-fresh')).headers['retry-after'], '1')
  t.equal(s.upstream.seen('local0').length + s.upstream.seen('local4').length, 0)
})

t.test('Retry-After is capped at RATE_LIMIT_COOLDOWN_MAX_MS', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMIT_COOLDOWN_MAX_MS: '60000' })
  s.upstream.plan('a', { kind: 'answer', answer: answer(429, [['Retry-After', '86400']], '') })
  await s.call('/v2/store/x', 'a')
  t.equal((await s.call('/v2/store/x', 'b')).headers['retry-after'], '60')
})

t.test('Apigee\'s 500 with policies.ratelimit.*: passed on byte for byte, and a cool-down', async (t) => {
  const s = await quotaSidecar(t, {})
  const headers: Array<[string, string]> = [['Content-Type', 'application/json'], ['X-Apigee', 'quota']]
  s.upstream.plan('quota', {
    kind: 'answer',
    answer: { status: 500, headers, body: Buffer.from(SPIKE_ARREST_BODY.replace('SpikeArrestViolation', 'QuotaViolation')), framing: 'chunked' }
  })
  const seen = await s.call('/v2/store/x', 'quota')
  t.equal(seen.status, 500)
  t.equal(seen.body, SPIKE_ARREST_BODY.replace('SpikeArrestViolation', 'QuotaViolation'))
  t.equal(seen.headers['x-apigee'], 'quota')
  t.equal((await s.call('/v2/store/x', 'cooled')).status, 429)
  t.same(s.upstream.seen('cooled'), [])
})

t.test('a 500 without that code is not a rate-limit answer; nor is a large one', async (t) => {
  const s = await quotaSidecar(t, {})
  s.upstream.plan('plain', { kind: 'answer', answer: answer(500, [['Content-Type', 'application/json']], '{"fault":{"detail":{"errorcode":"steps.javascript.ScriptError"}}}') })
  s.upstream.plan('text', { kind: 'answer', answer: answer(500, [], 'policies.ratelimit.QuotaViolation (not JSON)') })
  const large = Buffer.concat([Buffer.from(SPIKE_ARREST_BODY.slice(0, -1) + ',"pad":"'), Buffer.alloc(70 * 1024, 0x61), Buffer.from('"}')])
  s.upstream.plan('large', { kind: 'answer', answer: { status: 500, headers: [], body: large, framing: 'length' } })
  for (const id of ['plain', 'text', 'large']) {
    const seen = await s.call('/v2/store/x', id)
    t.equal(seen.status, 500, id)
    t.equal((await s.call('/v2/store/x', `${id}-next`)).status, 200, `${id}: no cool-down`)
  }
  t.equal((await s.call('/v2/store/x', 'large-again')).status, 200)
  const m = await s.metrics()
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_upstream_answers_total', { rule: 'upstream' })), undefined)
})

t.test('RATE_LIMIT_COOLDOWN_MS=0 turns cool-downs off: every 429 reaches the upstream and its caller', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMIT_COOLDOWN_MS: '0' })
  s.upstream.plan('a', { kind: 'answer', answer: answer(429, [['Retry-After', '60']], '') })
  s.upstream.plan('b', { kind: 'answer', answer: answer(429, [['Retry-After', '60']], '') })
  t.equal((await s.call('/v2/store/x', 'a')).status, 429)
  t.equal((await s.call('/v2/store/x', 'b')).status, 429)
  t.equal(s.upstream.received.length, 2)
})
