// The quota metrics agree with what the callers saw, answer by answer; /readyz and /status in memory.
import t from 'tap'
import { request } from 'undici'
import { asObject, createTally, delta } from '../helpers/metrics-scrape.js'
import { answer, quotaSidecar } from './sidecar.js'

const RULES = 'GET /v2/store/products/catalog 2/1h; * /v2/store/orders/** 3/1m'

t.test('every local 429, delay and gateway rate-limit answer is counted as its caller saw it', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const before = await s.metrics()
  const requests = createTally()
  const errors = createTally()
  const limited = createTally()
  const upstreamAnswers = createTally()
  // A fixed script: catalog calls, order calls, unmatched calls, with gateway 429s here and there.
  const script: Array<[string, string, string, number | undefined]> = [
    ['GET', '/v2/store/products/catalog', 'GET /v2/store/products/catalog', undefined],
    ['GET', '/v2/store/products/catalog', 'GET /v2/store/products/catalog', 429],
    ['GET', '/v2/store/products/catalog', 'GET /v2/store/products/catalog', undefined],
    ['POST', '/v2/store/orders/1', '* /v2/store/orders/**', undefined],
    ['PUT', '/v2/store/orders/2', '* /v2/store/orders/**', undefined],
    ['GET', '/v2/store/orders/3', '* /v2/store/orders/**', undefined],
    ['GET', '/v2/store/orders/4', '* /v2/store/orders/**', undefined],
    ['GET', '/v2/store/products/x', 'upstream', 429],
    ['GET', '/v2/store/products/y', 'upstream', undefined],
    ['DELETE', '/v2/store/products/z', 'upstream', undefined]
  ]
  for (const [i, [method, path, rule, gateway]] of script.entries()) {
    const id = `r${i}`
    if (gateway !== undefined) s.upstream.plan(id, { kind: 'answer', answer: answer(gateway, [['Retry-After', '30']], 'gateway') })
    const seen = await s.call(path, id, method)
    requests.add('store_auth_proxy_requests_total', { method, status_class: `${Math.floor(seen.status / 100)}xx`, outcome: 'completed' })
    const sent = s.upstream.seen(id).length > 0
    if (sent && seen.status === 429) upstreamAnswers.add('store_auth_proxy_rate_limit_upstream_answers_total', { rule })
    if (!sent) {
      t.equal(seen.status, 429, `${id}: answered locally only with 429`)
      const body = JSON.parse(seen.body) as { error: string, message: string }
      errors.add('store_auth_proxy_errors_total', { code: body.error })
      limited.add('store_auth_proxy_rate_limited_total', { rule, reason: /cool-down/.test(body.message) ? 'cooldown' : 'budget', action: 'refused' })
    }
  }
  const after = await s.metrics()
  for (const [name, tally] of [
    ['store_auth_proxy_requests_total', requests], ['store_auth_proxy_errors_total', errors],
    ['store_auth_proxy_rate_limited_total', limited], ['store_auth_proxy_rate_limit_upstream_answers_total', upstreamAnswers]
  ] as const) {
    t.same(asObject(delta(before, after, name)), asObject(tally.counts), name)
  }
  t.ok(limited.counts.size >= 3, 'the script exercised budget and cool-down refusals on several rules')
})

t.test('/readyz and /status without Redis: memory, no note; the config shows the rules\' source', async (t) => {
  const s = await quotaSidecar(t, { RATE_LIMITS: RULES })
  const ready = await request(s.adminUrl + '/readyz')
  t.equal(ready.statusCode, 200)
  t.match(await ready.body.json(), { reason: 'token held', rateLimits: { backend: 'memory', note: null } })
  const status = await s.status()
  t.match(status, {
    rateLimits: { backend: 'memory', redis: null, cooldowns: [] },
    config: { RATE_LIMITS: 'RATE_LIMITS', RATE_LIMIT_MAX_WAIT_MS: 1000, RATE_LIMIT_COOLDOWN_MS: 1000, RATE_LIMIT_REDIS_URL: '' }
  })
  const m = await s.metrics()
  t.equal(m.get('store_auth_proxy_rate_limit_backend{backend="memory"}'), 1)
  t.equal(m.get('store_auth_proxy_rate_limit_redis_up{}'), undefined, 'exported only with Redis configured')
})
