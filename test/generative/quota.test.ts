// Quota cases from a misbehaving gateway: 429s with and without Retry-After
// (delta-seconds, HTTP-date, unusable values, over the cap), Apigee's 500 with a
// policies.ratelimit.* errorcode, and plain 500s that are not rate-limit answers, to
// generated requests. The invariants: the gateway's answer reaches its caller unchanged;
// after a rate-limit answer, callers in that scope get at once a local 429 with the right
// Retry-After and the upstream sees nothing, while other scopes are untouched; a plain 500
// starts no cool-down; the metrics count what the callers saw.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { call, headerMap, type CallerResult } from '../helpers/caller.js'
import type { Answer } from '../helpers/recording-upstream.js'
import { asObject, createTally, delta, scrapeSettled } from '../helpers/metrics-scrape.js'
import { METHODS, pick, requestCaseArb, toCallerRequest, type BodySpec, type RequestCase } from './arbitraries.js'
import { checkProperty, describe, fileBudget, nextId, ownError, setup, statusClass } from './harness.js'

/**
 * Fresh scopes: every run (shrinking included) gets a rule of its own, so no run's
 * cool-down or backoff reaches another; a scope comes round again only after SCOPES
 * runs, long after its cool-down (at most RATE_LIMIT_COOLDOWN_MAX_MS) and backoff ended.
 */
const SCOPES = 1000
const scopeRule = (i: number): string => `* /v2/store/s${i}/**`
const BACKOFF_RULE = '* /v2/store/backoff/**'
const RULES = [...Array.from({ length: SCOPES }, (_, i) => `${scopeRule(i)} 1000/1s`), `${BACKOFF_RULE} 1000/1s`].join('; ')
const COOLDOWN_MS = 1000
const COOLDOWN_MAX_MS = 3000

type RetryAfter =
  | { as: 'none' }
  | { as: 'seconds', s: number }
  /** An HTTP-date `s` seconds ahead (second resolution: between s − 1 and s). */
  | { as: 'date', s: number }
  /** Not a usable Retry-After (RFC 9110 §10.2.3): the backoff applies. */
  | { as: 'unusable', value: string }

export type GatewayAnswer =
  | { kind: '429', retryAfter: RetryAfter, body: 'apigee' | 'empty' | 'text', framing: 'length' | 'chunked' | 'close' }
  | { kind: 'apigee-500', errorcode: 'SpikeArrestViolation' | 'QuotaViolation', retryAfter: RetryAfter, contentType: string, framing: 'length' | 'chunked' | 'close' }
  | { kind: 'plain-500', body: 'other-fault' | 'not-json' | 'text-mentioning-ratelimit' | 'large-json', framing: 'length' | 'chunked' | 'close' }

const faultBody = (faultstring: string, errorcode: string): string => JSON.stringify({ fault: { faultstring, detail: { errorcode } } })
export const SPIKE_ARREST = '{"fault":{"faultstring":"Spike arrest violation. Allowed rate : 5ps","detail":{"errorcode":"policies.ratelimit.SpikeArrestViolation"}}}'
export const QUOTA_VIOLATION = '{"fault":{"faultstring":"Rate limit quota violation. Quota limit  exceeded. Identifier : _default","detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}}'

const retryAfterArb: fc.Arbitrary<RetryAfter> = fc.oneof(
  fc.constant<RetryAfter>({ as: 'none' }),
  // Over the cap (RATE_LIMIT_COOLDOWN_MAX_MS = 3 s) too.
  pick([1, 2, 3, 7200]).map((s): RetryAfter => ({ as: 'seconds', s })),
  pick([2, 3]).map((s): RetryAfter => ({ as: 'date', s })),
  pick(['soon', '-1', '1.5', '', '0x10']).map((value): RetryAfter => ({ as: 'unusable', value }))
)
const framingArb = pick(['length', 'chunked', 'close'] as const)

export const gatewayAnswerArb: fc.Arbitrary<GatewayAnswer> = fc.oneof(
  fc.record({ kind: fc.constant('429' as const), retryAfter: retryAfterArb, body: pick(['apigee', 'empty', 'text'] as const), framing: framingArb }),
  fc.record({
    kind: fc.constant('apigee-500' as const),
    errorcode: pick(['SpikeArrestViolation', 'QuotaViolation'] as const),
    retryAfter: retryAfterArb,
    contentType: pick(['application/json', 'application/json; charset=UTF-8']),
    framing: framingArb
  }),
  fc.record({ kind: fc.constant('plain-500' as const), body: pick(['other-fault', 'not-json', 'text-mentioning-ratelimit', 'large-json'] as const), framing: framingArb })
)

function retryAfterHeader (r: RetryAfter): Array<[string, string]> {
  switch (r.as) {
    case 'none': return []
    case 'seconds': return [['Retry-After', String(r.s)]]
    case 'date': return [['Retry-After', new Date(Date.now() + r.s * 1000).toUTCString()]]
    case 'unusable': return [['Retry-After', r.value]]
  }
}

function toGatewayAnswer (g: GatewayAnswer): Answer {
  switch (g.kind) {
    case '429': {
      const body = { apigee: SPIKE_ARREST, empty: '', text: 'Too Many Requests' }[g.body]
      const type: Array<[string, string]> = g.body === 'apigee' ? [['Content-Type', 'application/json']] : g.body === 'text' ? [['Content-Type', 'text/plain']] : []
      return { status: 429, headers: [...type, ...retryAfterHeader(g.retryAfter), ['X-Gateway', 'apigee']], body: Buffer.from(body), framing: g.framing }
    }
    case 'apigee-500': {
      const body = g.errorcode === 'SpikeArrestViolation' ? SPIKE_ARREST : QUOTA_VIOLATION
      return { status: 500, headers: [['Content-Type', g.contentType], ...retryAfterHeader(g.retryAfter), ['X-Gateway', 'apigee']], body: Buffer.from(body), framing: g.framing }
    }
    case 'plain-500': {
      const body = {
        'other-fault': faultBody('Internal error', 'messaging.runtime.UnknownError'),
        'not-json': '<html>policies.ratelimit.QuotaViolation</html>',
        'text-mentioning-ratelimit': 'fault.detail.errorcode: policies.ratelimit.SpikeArrestViolation',
        // Over the 64 KiB the sidecar holds back to look: passed on byte for byte all the same.
        'large-json': faultBody('x'.repeat(100 * 1024), 'steps.servicecallout.ExecutionFailed')
      }[g.body]
      return { status: 500, headers: [['Content-Type', g.body === 'not-json' ? 'text/html' : 'application/json']], body: Buffer.from(body), framing: g.framing }
    }
  }
}

/** The Retry-After range a caller right after the gateway's answer must get, or null when no cool-down starts. */
export function expectedRetryAfter (g: GatewayAnswer): [number, number] | null {
  if (g.kind === 'plain-500') return null
  const r = g.retryAfter
  const cap = COOLDOWN_MAX_MS / 1000
  switch (r.as) {
    case 'seconds': return [Math.max(1, Math.min(r.s, cap) - 1), Math.min(r.s, cap)]
    case 'date': return [Math.max(1, r.s - 2), r.s]
    // The first rate-limit answer in a fresh scope: RATE_LIMIT_COOLDOWN_MS, no backoff yet.
    case 'none':
    case 'unusable': return [1, Math.ceil(COOLDOWN_MS / 1000)]
  }
}

const subPathArb = pick(['', '/', '/orders', '/orders/42', '/products/catalog', '/a/b/c?page=2', '/orders?x=%2F'])
const requestArb = requestCaseArb({ methods: METHODS, body: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 64 }).map((bytes): BodySpec => ({ bytes })) })

fileBudget(t)

t.test('quota: rate-limit answers from the gateway', async (t) => {
  const s = await setup(t, {
    RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_COOLDOWN_MS: String(COOLDOWN_MS), RATE_LIMIT_COOLDOWN_MAX_MS: String(COOLDOWN_MAX_MS), UPSTREAM_TIMEOUT_MS: '5000'
  })
  const quota = createTally()
  await s.baseline()
  const before = await scrapeSettled(s.adminUrl)
  let scopes = 0

  /** One call, counted as the metrics must count it. */
  const send = async (c: RequestCase, id: string): Promise<CallerResult> => {
    const result = await call(s.proxyUrl, toCallerRequest(c, id), { timeoutMs: 10_000 })
    if (result.status !== undefined) s.expect.request(c.method, statusClass(result.status), result.complete ? 'completed' : 'truncated')
    return result
  }

  /** A local 429 for the cool-down of `rule`, Retry-After within `range`. */
  const localCooldown = (c: RequestCase, r: CallerResult, rule: string, [low, high]: [number, number]): void => {
    assert.equal(r.status, 429, `a local 429 during the cool-down (${describe(r)}: ${r.body.toString('utf8').slice(0, 200)})`)
    s.expect.error('UPSTREAM_RATE_LIMITED')
    quota.add('store_auth_proxy_rate_limited_total', { rule, reason: 'cooldown', action: 'refused' })
    const headers = headerMap(r.rawHeaders)
    assert.deepEqual(headers.get('content-type'), ['application/json; charset=utf-8'], 'the JSON error content type')
    const retryAfter = headers.get('retry-after')?.[0] ?? ''
    assert.match(retryAfter, /^\d+$/, 'Retry-After in delta-seconds')
    assert.ok(Number(retryAfter) >= low && Number(retryAfter) <= high, `Retry-After ${retryAfter} within [${low}, ${high}]`)
    if (c.method === 'HEAD') return
    const own = ownError(r)
    assert.equal(own?.error, 'UPSTREAM_RATE_LIMITED')
    assert.ok(own?.message.includes(rule) === true && own.message.includes('cool-down'), `the message names ${rule} and the cool-down: ${own?.message ?? ''}`)
  }

  const property = fc.asyncProperty(requestArb, subPathArb, gatewayAnswerArb, fc.array(fc.tuple(requestArb, subPathArb), { minLength: 1, maxLength: 3 }), async (c0, sub0, g, during) => {
    const scope = scopes++ % SCOPES
    const rule = scopeRule(scope)
    const base = `/v2/store/s${scope}`
    // A HEAD answer has no body, so the 500 variant (told apart by its body) goes to a GET.
    const c: RequestCase = { ...c0, method: g.kind !== '429' && c0.method === 'HEAD' ? 'GET' : c0.method, target: base + sub0 }
    const id = nextId('q')
    const answer = toGatewayAnswer(g)
    s.upstream.plan(id, { kind: 'answer', answer })
    const first = await send(c, id)
    const cooled = expectedRetryAfter(g)
    if (cooled !== null) quota.add('store_auth_proxy_rate_limit_upstream_answers_total', { rule })

    // The gateway's answer, unchanged.
    assert.equal(s.upstream.seen(id).length, 1, 'sent upstream once')
    assert.equal(first.status, answer.status, `the gateway's status (${describe(first)}: ${first.body.toString('utf8').slice(0, 200)})`)
    assert.equal(first.complete, true, 'complete')
    const headers = headerMap(first.rawHeaders)
    for (const [name, value] of answer.headers) assert.deepEqual(headers.get(name.toLowerCase()), [value], `${name} unchanged`)
    if (c.method !== 'HEAD') assert.ok(first.body.equals(answer.body), `the body byte for byte (${first.body.length} of ${answer.body.length} bytes)`)

    for (const [d0, sub] of during) {
      const d: RequestCase = { ...d0, target: base + sub }
      const dId = nextId('q-during')
      const r = await send(d, dId)
      if (cooled === null) {
        assert.equal(r.status, 200, `a plain 500 starts no cool-down: the next call goes upstream (${describe(r)})`)
        assert.equal(s.upstream.seen(dId).length, 1)
      } else {
        assert.equal(s.upstream.seen(dId).length, 0, 'the upstream sees nothing during the cool-down')
        localCooldown(d, r, rule, cooled)
      }
    }
    // Other scopes are untouched: another rule's, and a request matching no rule.
    for (const target of [`/v2/store/s${(scope + 1) % SCOPES}/orders`, '/v2/other/orders']) {
      const other = await send({ ...c0, method: 'GET', target, body: { bytes: [] }, framing: 'none', expectContinue: false }, nextId('q-other'))
      assert.equal(other.status, 200, `${target}: another scope is not cooled down (${describe(other)})`)
    }
  })
  await t.test('the answer reaches its caller unchanged; its scope cools down for the right time, no other does; a plain 500 cools nothing', async (t) => {
    await checkProperty(t, 'gateway rate-limit answers', property, { numRuns: 60, timeLimitMs: 30_000 })
  })

  await t.test('a cool-down ends; a repeat soon after doubles the next one, up to RATE_LIMIT_COOLDOWN_MAX_MS', async (t) => {
    const get = (target: string): RequestCase => ({ method: 'GET', target, headers: [], contentType: null, body: { bytes: [] }, framing: 'none', cutsPerMille: [], expectContinue: false })
    const c = get('/v2/store/backoff/orders')
    // Each step: the gateway's 429 without Retry-After, then a caller at once (the cool-down
    // and its Retry-After), then a caller just after the cool-down should have ended.
    const steps: Array<{ lengthS: number, retryAfter: [number, number] }> = [
      { lengthS: 1, retryAfter: [1, 1] }, // RATE_LIMIT_COOLDOWN_MS
      { lengthS: 2, retryAfter: [2, 2] }, // a repeat within 1 s of the end: doubled
      { lengthS: 3, retryAfter: [3, 3] } // doubled again, 4 s, capped at RATE_LIMIT_COOLDOWN_MAX_MS
    ]
    for (const [i, step] of steps.entries()) {
      const id = nextId('q-backoff')
      s.upstream.plan(id, { kind: 'answer', answer: toGatewayAnswer({ kind: '429', retryAfter: { as: 'none' }, body: 'apigee', framing: 'length' }) })
      const limited = await send(c, id)
      const answeredAt = performance.now()
      t.equal(limited.status, 429, `step ${i + 1}: the gateway's 429 passed on (${describe(limited)})`)
      t.equal(s.upstream.seen(id).length, 1, `step ${i + 1}: it reached the upstream: the cool-down before it had ended`)
      quota.add('store_auth_proxy_rate_limit_upstream_answers_total', { rule: BACKOFF_RULE })
      const cooled = await send(c, nextId('q-backoff-during'))
      localCooldown(c, cooled, BACKOFF_RULE, step.retryAfter)
      t.pass(`step ${i + 1}: a ${step.lengthS} s cool-down, Retry-After ${headerMap(cooled.rawHeaders).get('retry-after')?.[0] ?? ''}`)
      await new Promise((resolve) => setTimeout(resolve, answeredAt + step.lengthS * 1000 + 150 - performance.now()))
    }
    const through = await send(c, nextId('q-backoff-after'))
    t.equal(through.status, 200, `after the last cool-down, calls go through again (${describe(through)})`)
  })

  await t.test('metrics agree with what the callers saw', async (t) => {
    await s.checkMetrics(t)
    const after = await scrapeSettled(s.adminUrl)
    const wanted = (name: string): Record<string, number> => asObject(new Map([...quota.counts].filter(([k]) => k.startsWith(name + '{'))))
    for (const name of ['store_auth_proxy_rate_limit_upstream_answers_total', 'store_auth_proxy_rate_limited_total']) {
      t.same(asObject(delta(before, after, name)), wanted(name), `${name} counts what callers saw`)
    }
  })
  await t.test('logs', async (t) => { s.checkLogs(t) })
})
