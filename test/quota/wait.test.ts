// Over budget, a request waits when its budget frees within RATE_LIMIT_MAX_WAIT_MS
// (smoothing a burst), else is refused at once; a caller that leaves while waiting is
// never sent and spends nothing.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { request } from 'undici'
import { scrape, type Samples } from '../helpers/metrics-scrape.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { answer, quotaSidecar, rateLimited } from './sidecar.js'

const inFlight = (m: Samples): number => m.get('store_auth_proxy_requests_in_flight{}') ?? 0

const RULE = '* /v2/store/**'

/** Real time for the sidecar to take a request in and start its wait (the fake clock stands still). */
async function until (condition: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500 && !(await condition()); i++) await sleep(5)
}

t.test('a burst over a per-second budget waits for the next window and is sent, counted as delayed', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 2/1s`, RATE_LIMIT_MAX_WAIT_MS: '1000' })
  t.equal((await s.call('/v2/store/a', 'a')).status, 200)
  t.equal((await s.call('/v2/store/b', 'b')).status, 200)
  const third = s.call('/v2/store/c', 'c')
  await until(async () => inFlight(await scrape(s.adminUrl)) === 1)
  await sleep(20)
  t.same(s.upstream.seen('c'), [], 'still waiting')
  await s.clock.tick(1000)
  t.equal((await third).status, 200)
  t.equal(s.upstream.seen('c').length, 1)
  const m = await s.metrics()
  t.equal(m.get(rateLimited(RULE, 'budget', 'delayed')), 1)
  t.equal(m.get(rateLimited(RULE, 'budget', 'refused')), undefined)
})

t.test('a budget that frees later than RATE_LIMIT_MAX_WAIT_MS is refused at once; 0 never waits', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: 'GET /v2/store/x 1/5s; GET /v2/store/y 1/1s', RATE_LIMIT_MAX_WAIT_MS: '1000' })
  t.equal((await s.call('/v2/store/x', 'x1')).status, 200)
  const refused = await s.call('/v2/store/x', 'x2')
  t.equal(refused.status, 429, 'frees in 5 s, more than the 1 s it may wait')
  t.equal(refused.headers['retry-after'], '5')

  const never = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1/1s`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await never.call('/v2/store/a', 'a')).status, 200)
  const at = await never.call('/v2/store/b', 'b')
  t.equal(at.status, 429)
  t.equal(at.headers['retry-after'], '1')
})

t.test('a caller that leaves while waiting is never sent and spends nothing', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1/10s`, RATE_LIMIT_MAX_WAIT_MS: '10000' })
  t.equal((await s.call('/v2/store/a', 'first')).status, 200)
  const controller = new AbortController()
  const leaving = request(s.proxyUrl + '/v2/store/b', { headers: { [ID_HEADER]: 'gone' }, signal: controller.signal })
    .then(() => 'answered', () => 'aborted')
  await until(async () => inFlight(await scrape(s.adminUrl)) === 1)
  controller.abort()
  t.equal(await leaving, 'aborted')
  await until(async () => inFlight(await scrape(s.adminUrl)) === 0)
  await s.clock.tick(10_000)
  t.same(s.upstream.seen('gone'), [], 'never sent, not even once its wait would have ended')
  t.equal((await s.call('/v2/store/c', 'next')).status, 200, 'the new window was not spent by the caller who left')
  const m = await s.metrics()
  t.equal(m.get(rateLimited(RULE, 'budget', 'delayed')), undefined, 'sent at once, not delayed')
  t.equal(m.get('store_auth_proxy_requests_total{method="GET",outcome="aborted",status_class="none"}'), 1)
})

t.test('a cool-down that starts while a request waits for its budget refuses it when the wait ends', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1/1s`, RATE_LIMIT_MAX_WAIT_MS: '1000' })
  // The first request's 429 comes late (after interim answers), while the second waits for the budget.
  s.upstream.plan('first', {
    kind: 'interim', code: 103, count: 2, everyMs: 500, final: answer(429, [['Retry-After', '60']], '')
  })
  const first = s.call('/v2/store/a', 'first')
  await until(() => s.upstream.seen('first').length === 1)
  const waiting = s.call('/v2/store/b', 'waiting')
  await until(async () => inFlight(await scrape(s.adminUrl)) === 2)
  t.equal((await first).status, 429)
  await s.clock.tick(1000)
  const refused = await waiting
  t.equal(refused.status, 429)
  t.equal(refused.headers['retry-after'], '59')
  t.match(JSON.parse(refused.body), { message: /cool-down/ })
  t.same(s.upstream.seen('waiting'), [])
})
