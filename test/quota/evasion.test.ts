// Attacks on the quota guard's matching and answers, first written by a reviewer who did
// not write the guard: requests that try to reach TI past a spent budget or a cool-down.
import t from 'tap'
import { gzipSync } from 'node:zlib'
import { request } from 'undici'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { answer, quotaSidecar, SPIKE_ARREST_BODY } from './sidecar.js'

const CATALOG = '/v2/store/products/catalog'
const CATALOG_RULE = `GET ${CATALOG} 1/4h 6/1d`

t.test('a fragment in the request target is refused (400) before any rule or send: it once reached TI uncounted, served as the catalog', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: CATALOG_RULE, RATE_LIMIT_MAX_WAIT_MS: '0' })
  // Raw bytes: an HTTP client would strip the fragment before sending, an attacker does not.
  for (const [i, target] of [`${CATALOG}#x`, `${CATALOG}?a=1#x`, `${CATALOG}%23x#`, '/v2/store/#/products/catalog'].entries()) {
    const answer = await rawRequest(s.proxyUrl, `GET ${target} HTTP/1.1\r\nHost: localhost\r\n${ID_HEADER}: frag${i}\r\nConnection: close\r\n\r\n`)
    t.equal(statusOf(answer), 400, target)
    t.match(answer, /"error":"BAD_REQUEST","message":"[^"]*must not contain #/, target)
  }
  t.same(s.upstream.received.filter((r) => r.url.includes('#')), [], 'TI saw no target with #')
  t.equal((await s.call(CATALOG, 'real')).status, 200, 'the budget is untouched: the real catalog call goes')
  t.equal((await s.call(`${CATALOG}%23x`, 'encoded')).status, 200, 'a percent-encoded # is an ordinary path byte (another resource)')
})

t.test('HEAD counts against a GET rule (it once reached TI with the catalog budget spent)', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: CATALOG_RULE, RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call(CATALOG, 'a')).status, 200)
  t.equal((await s.call(CATALOG, 'b')).status, 429, 'GET: refused locally')
  const head = await s.call(CATALOG, 'head', 'HEAD')
  t.same(s.upstream.seen('head'), [], 'TI must not see a HEAD of a resource whose budget is spent (Apigee counts every call)')
  t.equal(head.status, 429)
})

t.test('a trailing /, an empty segment or ;parameters do not slip past the catalog rule', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: CATALOG_RULE, RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call(CATALOG, 'a')).status, 200)
  for (const [id, path] of [['slash', `${CATALOG}/`], ['empty', '/v2/store//products/catalog'], ['matrix', `${CATALOG};v=1`]] as const) {
    await s.call(path, id)
    t.same(s.upstream.seen(id).map((r) => r.url), [], `${path}: TI must not see it while the budget is spent`)
  }
})

t.test('a gzip-encoded Apigee 500 rate-limit fault starts a cool-down, and is passed on as it came', async (t) => {
  const s = await quotaSidecar(t, {})
  const gz = gzipSync(Buffer.from(SPIKE_ARREST_BODY))
  s.upstream.plan('gz', {
    kind: 'answer',
    answer: { status: 500, headers: [['Content-Type', 'application/json'], ['Content-Encoding', 'gzip']], body: gz, framing: 'chunked' }
  })
  const res = await request(s.proxyUrl + '/v2/store/x', { headers: { [ID_HEADER]: 'gz', 'accept-encoding': 'gzip' } })
  t.equal(res.statusCode, 500)
  t.ok(Buffer.from(await res.body.arrayBuffer()).equals(gz), 'passed on byte for byte (still gzip)')
  const next = await s.call('/v2/store/x', 'next')
  t.same(s.upstream.seen('next'), [], 'the gateway said "rate limited": TI must not see the next call')
  t.equal(next.status, 429)
})

t.test('Retry-After 0, negative, fractional or a past HTTP-date falls back to the backoff (and it ends)', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMIT_COOLDOWN_MS: '2000', RATE_LIMIT_COOLDOWN_MAX_MS: '60000' })
  let n = 0
  for (const value of ['0', '-5', '1.5', 'Sun, 06 Nov 1994 08:49:37 GMT']) {
    n += 1
    s.upstream.plan(`r${n}`, { kind: 'answer', answer: answer(429, [['Retry-After', value]], '') })
    t.equal((await s.call('/v2/store/x', `r${n}`)).status, 429)
    const cooled = await s.call('/v2/store/x', `c${n}`)
    t.equal(cooled.status, 429, `${value}: cooling down`)
    t.ok(Number(cooled.headers['retry-after']) >= 1, `${value}: Retry-After at least 1`)
    t.same(s.upstream.seen(`c${n}`), [])
    // Well past any backoff (capped at 60 s) and its memory: the next one starts afresh.
    await s.advance(130_000)
    t.equal((await s.call('/v2/store/x', `ok${n}`)).status, 200, `${value}: the cool-down ended`)
  }
})

t.test('two Retry-After headers on a 429: a cool-down, capped, never 0', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMIT_COOLDOWN_MAX_MS: '60000' })
  s.upstream.plan('two', { kind: 'answer', answer: answer(429, [['Retry-After', '7'], ['Retry-After', '999999999']], '') })
  t.equal((await s.call('/v2/store/x', 'two')).status, 429)
  const cooled = await s.call('/v2/store/x', 'cooled')
  t.equal(cooled.status, 429)
  const secs = Number(cooled.headers['retry-after'])
  t.ok(secs >= 1 && secs <= 60, `Retry-After ${secs} within 1..60`)
  t.same(s.upstream.seen('cooled'), [])
})

t.test('a 401 replay during a cool-down is refused locally, not sent', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: '* /v2/store/** 100/1m' })
  s.upstream.plan('limited', { kind: 'answer', answer: answer(429, [['Retry-After', '30']], '') })
  t.equal((await s.call('/v2/store/a', 'limited')).status, 429)
  s.upstream.plan('revoked', { kind: 'unauthorized', answer: answer(200, [], 'ok') })
  const seen = await s.call('/v2/store/b', 'revoked')
  t.equal(seen.status, 429)
  t.same(s.upstream.seen('revoked'), [], 'cool-down: nothing at all is sent')
})

t.test('40 concurrent callers against 5/1m in memory: exactly 5 reach TI, the rest get 429 with Retry-After', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: '* /v2/store/** 5/1m', RATE_LIMIT_MAX_WAIT_MS: '0' })
  const seen = await Promise.all(Array.from({ length: 40 }, (_, i) => s.call(`/v2/store/${i}`, `c${i}`, i % 2 === 0 ? 'GET' : 'POST')))
  t.equal(seen.filter((x) => x.status === 200).length, 5)
  t.equal(s.upstream.received.length, 5)
  const refused = seen.filter((x) => x.status === 429)
  t.equal(refused.length, 35)
  t.ok(refused.every((x) => x.headers['retry-after'] === '60'), 'Retry-After 60 on every refusal')
})
