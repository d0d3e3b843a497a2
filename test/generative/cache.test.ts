// The differential test through the read cache: each generated GET goes to the recording
// upstream directly, then twice through a sidecar whose one rule caches everything
// (`GET /** ... cache=1h`). Whatever TI answers (any status, framing, headers, body), the
// caller gets the same answer as TI gave — status, end-to-end headers, body bytes — but for
// the documented additions (Cache-Status, Age, a Content-Length for a stored answer). The
// second call is a hit, reaching nobody, exactly when the first said `stored`; an answer a
// shared cache must not keep (not a 200, Set-Cookie, no-store, private) is never stored.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { call, endToEnd, headerMap, type CallerResult } from '../helpers/caller.js'
import { answerCaseArb, requestCaseArb, requestHeadersArb, targetArb, toAnswer, toCallerRequest, type BodySpec, type RequestCase } from './arbitraries.js'
import { checkProperty, createLabels, describe, fileBudget, nextId, setup, statusClass, type Labels, type Setup } from './harness.js'

const ADDED = ['cache-status', 'age', 'content-length']

function sameAnswer (direct: CallerResult, cached: CallerResult, what: string): void {
  assert.equal(cached.status, direct.status, `${what}: TI's status (${describe(cached)})`)
  assert.equal(cached.complete, true, `${what}: the answer ends cleanly`)
  assert.deepEqual(endToEnd(cached.rawHeaders, ADDED), endToEnd(direct.rawHeaders, ADDED), `${what}: TI's end-to-end headers, untouched`)
  assert.ok(cached.body.equals(direct.body), `${what}: the same body bytes (${cached.body.length} vs ${direct.body.length})`)
}

const statusOf = (r: CallerResult): string => headerMap(r.rawHeaders).get('cache-status')?.join(', ') ?? ''

/** May a shared cache keep this answer, by the rules docs/read-cache.md states? */
function storable (status: number, rawHeaders: string[]): boolean {
  const headers = headerMap(rawHeaders)
  const cc = (headers.get('cache-control') ?? []).join(',').toLowerCase()
  return status === 200 && !headers.has('set-cookie') && !/(^|[\s,])(no-store|private|no-cache)([\s,=]|$)/.test(cc) &&
    !(headers.get('vary') ?? []).join(',').split(',').some((v) => v.trim() === '*')
}

async function twice (s: Setup, labels: Labels, c: RequestCase, answer: ReturnType<typeof toAnswer>): Promise<void> {
  // Each case its own key: the query carries the case's id.
  const target = `${c.target}${c.target.includes('?') ? '&' : '?'}case=${nextId('k')}`
  const ids = [nextId('direct'), nextId('first'), nextId('second')]
  for (const id of ids) s.upstream.plan(id, { kind: 'answer', answer })
  const [directId, firstId, secondId] = ids as [string, string, string]
  const direct = await call(s.upstream.url, toCallerRequest({ ...c, target }, directId))
  const first = await call(s.proxyUrl, toCallerRequest({ ...c, target }, firstId))
  const second = await call(s.proxyUrl, toCallerRequest({ ...c, target }, secondId))
  for (const r of [first, second]) if (r.status !== undefined) s.expect.request(c.method, statusClass(r.status), r.complete ? 'completed' : 'truncated')
  assert.ok(direct.status !== undefined && direct.complete, `the upstream answered the direct request (${describe(direct)})`)

  sameAnswer(direct, first, 'the first call')
  sameAnswer(direct, second, 'the second call')
  const asked = headerMap(toCallerRequest(c, '').headers.flatMap(([n, v]) => (Array.isArray(v) ? v : [v]).flatMap((one) => [n, one])))
  const requestCc = (asked.get('cache-control') ?? []).join(',').toLowerCase()
  if (asked.has('cookie') || /(^|[\s,])no-store([\s,=]|$)/.test(requestCc)) {
    // Never the cache's: a Cookie may make TI's answer personal; the caller's no-store.
    labels.add('bypassed')
    assert.equal(statusOf(first) + statusOf(second), '', 'no Cache-Status: the cache was not asked')
    assert.equal(s.upstream.seen(secondId).length, 1, 'the second reached TI too')
    return
  }
  const stored = /; stored\b/.test(statusOf(first))
  const shouldStore = storable(direct.status ?? 0, direct.rawHeaders) && direct.body.length <= 8 * 1024 * 1024
  const fresh = /(^|[\s,])(no-cache|max-age=0)([\s,]|$)/.test(requestCc)
  assert.equal(stored, shouldStore, `stored exactly when a shared cache may keep it (${statusOf(first)}; ${direct.status ?? ''})`)
  assert.equal(s.upstream.seen(firstId).length, 1, 'the first call reached TI once')
  if (stored && fresh) {
    labels.add('stored, asked for TI\'s answer')
    assert.match(statusOf(second), /^store-auth-proxy; fwd=request/, 'the caller\'s no-cache asks TI again')
    assert.equal(s.upstream.seen(secondId).length, 1)
  } else if (stored) {
    labels.add('stored, then a hit')
    assert.match(statusOf(second), /^store-auth-proxy; hit; ttl=3[56]\d\d(, |$)/, 'the second is a fresh hit')
    assert.match(headerMap(second.rawHeaders).get('age')?.[0] ?? '', /^\d+$/)
    assert.equal(s.upstream.seen(secondId).length, 0, 'a hit reaches nobody')
  } else {
    labels.add(direct.status === 200 ? 'a 200 not stored' : 'not a 200')
    assert.match(statusOf(second), /fwd=miss/, 'not stored: the second asks TI too')
    assert.equal(s.upstream.seen(secondId).length, 1, 'the second reached TI once')
  }
}

fileBudget(t)

t.test('the differential invariants hold through the read cache', async (t) => {
  // RateLimit fields are the sidecar's own, not TI's: off, so TI's headers pass untouched.
  const s = await setup(t, { RATE_LIMITS: 'GET /** 1000000/1s cache=1h', RATE_LIMIT_HEADERS: 'false' })
  await s.baseline()
  const labels = createLabels()

  await t.test('any answer TI gives is passed on whole, stored only when a shared cache may keep it, and a hit is the same bytes', async (t) => {
    await checkProperty(t, 'through the cache', fc.asyncProperty(
      requestCaseArb({ methods: ['GET'], target: targetArb, headers: requestHeadersArb, body: fc.constant<BodySpec>({ bytes: [] }) }),
      // Half the answers a 200, the status a cache may store; the rest any status.
      fc.tuple(answerCaseArb, fc.boolean()).map(([a, ok]) => ok ? { ...a, status: 200 } : a),
      async (c, a) => { await twice(s, labels, c, toAnswer(a)) }
    ), { numRuns: 40, timeLimitMs: 20_000, atLeast: { labels, counts: { 'stored, then a hit': 5, 'not a 200': 5 } } })
  })

  await t.test('metrics agree with what the callers saw', async (t) => { await s.checkMetrics(t) })
  await t.test('logs', async (t) => { s.checkLogs(t) })
})
