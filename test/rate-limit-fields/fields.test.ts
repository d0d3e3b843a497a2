// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers) on the answers of a
// budgeted rule, one sidecar on a fake clock: what each answer says, what a refusal and a stored
// answer say, the switch, and the remaining-budget gauges.
import t from 'tap'
import { seriesKey } from '../helpers/metrics-scrape.js'
import { answer, HOUR, quotaSidecar, type Seen } from '../quota/sidecar.js'

const CATALOG = '/v2/store/products/catalog'
const RULE = `GET ${CATALOG}`

const fieldsOf = (seen: Seen): { policy: unknown, rateLimit: unknown } => ({ policy: seen.headers['ratelimit-policy'], rateLimit: seen.headers.ratelimit })

t.test('a budgeted rule\'s answers say each limit and what is left of it after their own send', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 3/4h 5/1d; * /v2/store/** 100/1s`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const first = await s.call(CATALOG, 'a')
  t.equal(first.status, 200)
  t.same(fieldsOf(first), {
    policy: '"3/4h";q=3;w=14400, "5/1d";q=5;w=86400',
    rateLimit: '"3/4h";r=2;t=14400, "5/1d";r=4;t=86400'
  }, 'the policy of each limit; 2 and 4 left, each growing when this send leaves its window')
  await s.advance(HOUR)
  const second = await s.call(CATALOG, 'b')
  t.equal(second.headers.ratelimit, '"3/4h";r=1;t=10800, "5/1d";r=3;t=82800', 'the oldest send leaves in 3 h and 23 h')
  const third = await s.call(CATALOG, 'c')
  t.equal(third.headers.ratelimit, '"3/4h";r=0;t=10800, "5/1d";r=2;t=82800', 'the last of the 4 h budget')

  const refused = await s.call(CATALOG, 'd')
  t.equal(refused.status, 429)
  t.equal(refused.headers['retry-after'], '10800')
  t.same(fieldsOf(refused), {
    policy: '"3/4h";q=3;w=14400, "5/1d";q=5;w=86400',
    rateLimit: '"3/4h";r=0;t=10800, "5/1d";r=0;t=10800'
  }, 'a local refusal: nothing left of any limit until its Retry-After')

  const other = await s.call('/v2/store/orders', 'e')
  t.equal(other.headers['ratelimit-policy'], '"100/1s";q=100;w=1', 'every budgeted rule says its own')
  t.equal(other.headers.ratelimit, '"100/1s";r=99;t=1')
})

t.test('the upstream\'s error answers and held-back answers carry the fields too', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 3/1h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  s.upstream.plan('x', { kind: 'answer', answer: answer(503, [['Content-Type', 'text/plain']], 'busy') })
  const failed = await s.call(CATALOG, 'x')
  t.equal(failed.status, 503)
  t.equal(failed.headers.ratelimit, '"3/1h";r=2;t=3600', 'a send TI answered with an error still spent its point')
  s.upstream.plan('y', { kind: 'answer', answer: answer(500, [['Content-Type', 'application/json']], '{"fault":{"detail":{"errorcode":"steps.x"}}}') })
  const held = await s.call(CATALOG, 'y')
  t.equal(held.status, 500)
  t.equal(held.headers.ratelimit, '"3/1h";r=1;t=3600', 'a 500 held back to look for Apigee\'s rate-limit fault')
})

t.test('a stored answer spends nothing and says what is left', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 2/4h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  s.upstream.plan('a', { kind: 'answer', answer: answer(200, [['Content-Type', 'application/json'], ['Cache-Control', 'max-age=3600']], '{"items":[]}') })
  const miss = await s.call(CATALOG, 'a')
  t.equal(miss.status, 200)
  t.equal(miss.headers.ratelimit, '"2/4h";r=1;t=14400')
  await s.advance(60_000)
  const hit = await s.call(CATALOG, 'b')
  t.equal(hit.status, 200)
  t.match(hit.headers['cache-status'], /hit/)
  t.same(fieldsOf(hit), { policy: '"2/4h";q=2;w=14400', rateLimit: '"2/4h";r=1;t=14340' }, 'still one left, a minute nearer its end')
  t.equal(s.upstream.received.length, 1)
})

t.test('RATE_LIMIT_HEADERS=false: no fields; a request of no rule never has them', async (t) => {
  const off = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1/4h`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_HEADERS: 'false' })
  const sent = await off.call(CATALOG, 'a')
  const refused = await off.call(CATALOG, 'b')
  t.same([sent.status, refused.status], [200, 429])
  t.same([fieldsOf(sent), fieldsOf(refused)], [{ policy: undefined, rateLimit: undefined }, { policy: undefined, rateLimit: undefined }])

  const on = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1/4h` })
  t.same(fieldsOf(await on.call('/v2/store/orders', 'c')), { policy: undefined, rateLimit: undefined }, 'no rule, no budget to tell')
})

t.test('the gauges: each limit\'s quota, and what is left as the fields say, read at each scrape', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 4/1h 10/1d`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const remaining = (limit: string): string => seriesKey('store_auth_proxy_rate_limit_remaining', { rule: RULE, limit })
  const quota = (limit: string): string => seriesKey('store_auth_proxy_rate_limit_quota', { rule: RULE, limit })
  let m = await s.metrics()
  t.same([m.get(quota('4/1h')), m.get(quota('10/1d')), m.get(remaining('4/1h')), m.get(remaining('10/1d'))], [4, 10, 4, 10])
  for (const id of ['a', 'b', 'c']) await s.call(CATALOG, id)
  m = await s.metrics()
  t.same([m.get(remaining('4/1h')), m.get(remaining('10/1d'))], [1, 7])
  await s.advance(HOUR)
  m = await s.metrics()
  t.same([m.get(remaining('4/1h')), m.get(remaining('10/1d'))], [4, 7], 'the hour\'s sends left its window: read again at the scrape')
})
