// Budgets on a fake clock: long windows without sleeping, exact Retry-After,
// and a refused request spends nothing from any of its rule's limits.
import t from 'tap'
import { seriesKey } from '../helpers/metrics-scrape.js'
import { DAY, HOUR, quotaSidecar, rateLimited } from './sidecar.js'

const CATALOG = '/v2/store/products/catalog'
const CATALOG_RULE = `GET ${CATALOG}`

t.test('the catalog rule (1/4h 6/1d): t0 allowed, t0+1h refused with Retry-After 10800, t0+4h allowed', async (t) => {
  // No waiting: within RATE_LIMIT_MAX_WAIT_MS of the window's end, a call would wait instead (wait.test.ts).
  const s = await quotaSidecar(t, { RATE_LIMITS: `${CATALOG_RULE} 1/4h 6/1d`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call(CATALOG, 'a')).status, 200)
  await s.advance(HOUR)
  const refused = await s.call(CATALOG, 'b')
  t.equal(refused.status, 429)
  t.equal(refused.headers['retry-after'], '10800', 'exactly the 3 h left of the 4 h window')
  t.match(refused.headers['content-type'], /^application\/json; charset=utf-8$/)
  const body = JSON.parse(refused.body) as { error: string, message: string }
  t.equal(body.error, 'UPSTREAM_RATE_LIMITED')
  t.match(body.message, CATALOG_RULE)
  t.match(body.message, 'budget')
  t.same(s.upstream.seen('b'), [], 'TI never saw the refused call')
  await s.advance(3 * HOUR - 1)
  t.equal((await s.call(CATALOG, 'c')).status, 429, 'one ms before the window ends')
  await s.advance(1)
  t.equal((await s.call(CATALOG, 'd')).status, 200, 'at t0+4h')
  t.equal(s.upstream.received.length, 2)

  // Other paths and methods are not this rule's.
  t.equal((await s.call(CATALOG, 'e', 'POST')).status, 200)
  t.equal((await s.call('/v2/store/products/LM358', 'f')).status, 200)
  const m = await s.metrics()
  t.equal(m.get(rateLimited(CATALOG_RULE, 'budget', 'refused')), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_errors_total', { code: 'UPSTREAM_RATE_LIMITED' })), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_requests_total', { method: 'GET', status_class: '4xx', outcome: 'completed' })), 2)
})

t.test('the 7th call of a day is refused with the seconds to the day window\'s end', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: 'GET /v2/store/products/catalog 1/1h 6/1d', RATE_LIMIT_MAX_WAIT_MS: '0' })
  for (let i = 0; i < 6; i++) {
    t.equal((await s.call(CATALOG, `call${i}`)).status, 200, `call ${i + 1} at t0+${i}h`)
    await s.advance(HOUR)
  }
  // t0+6h: the hourly window has room, the day's does not until t0+24h.
  const seventh = await s.call(CATALOG, 'seventh')
  t.equal(seventh.status, 429)
  t.equal(seventh.headers['retry-after'], String((DAY - 6 * HOUR) / 1000))
  await s.advance(DAY - 6 * HOUR - 1000)
  t.equal((await s.call(CATALOG, 'late')).headers['retry-after'], '1')
  await s.advance(1000)
  t.equal((await s.call(CATALOG, 'next-day')).status, 200)
})

t.test('Retry-After rounds up: 1 ms left is 1 s', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: '* /v2/store/** 1/10s', RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call('/v2/store/x', 'a')).status, 200)
  await s.advance(8500)
  t.equal((await s.call('/v2/store/y', 'b')).headers['retry-after'], '2', '1.5 s left')
  await s.advance(1499)
  t.equal((await s.call('/v2/store/z', 'c')).headers['retry-after'], '1', '1 ms left')
})

// rate-limiter-flexible's consume() and a union of limiters spend points on refusal: here a
// refused call must leave every limit of its rule as it was.
t.test('a refused request spends nothing from any of its rule\'s limits', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: 'GET /c 1/1h 3/1d', RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call('/c', 'first')).status, 200)
  for (let i = 0; i < 5; i++) {
    await s.advance(5 * 60_000)
    t.equal((await s.call('/c', `refused${i}`)).status, 429)
  }
  await s.advance(HOUR - 25 * 60_000)
  t.equal((await s.call('/c', 'second')).status, 200, 'the day limit still had room: the refusals took none of it')
  await s.advance(HOUR)
  t.equal((await s.call('/c', 'third')).status, 200)
  await s.advance(HOUR)
  const fourth = await s.call('/c', 'fourth')
  t.equal(fourth.status, 429, 'the day limit: 3 sends')
  t.equal(fourth.headers['retry-after'], String((DAY - 3 * HOUR) / 1000))
  t.same(s.upstream.received.map((r) => r.id), ['first', 'second', 'third'])
})

t.test('the first matching rule wins; percent-encoded unreserved characters cannot slip past a rule', async (t) => {
  const s = await quotaSidecar(t, {
    RATE_LIMITS: `GET ${CATALOG} 1/1d\n* /v2/store/** 100/1s`
  })
  t.equal((await s.call(CATALOG + '?currency=USD', 'a')).status, 200)
  for (const [i, target] of ['/v2/store/products/%63atalog', '/v2/store/products/%63%61talog?x=1', '/v2/%73tore/products/catalog'].entries()) {
    const seen = await s.call(target, `encoded${i}`)
    t.equal(seen.status, 429, target)
  }
  t.equal((await s.call('/v2/store/products/Catalog', 'case')).status, 200, 'literal segments are case-sensitive')
  t.equal(s.upstream.received.length, 2)
})

t.test('a replay after a 401 is a second send: it spends a second point', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: '* /v2/store/** 2/1m', RATE_LIMIT_MAX_WAIT_MS: '0' })
  s.upstream.plan('revoked', { kind: 'unauthorized', answer: { status: 200, headers: [], body: Buffer.from('ok'), framing: 'length' } })
  t.equal((await s.call('/v2/store/x', 'revoked')).status, 200)
  t.equal(s.upstream.seen('revoked').length, 2, 'sent twice: the 401, then the replay')
  const next = await s.call('/v2/store/y', 'next')
  t.equal(next.status, 429, 'both points of 2/1m are spent')
  t.same(s.upstream.seen('next'), [])
})
