import t from 'tap'
import { request } from 'undici'
import { readiness } from '../src/admin.js'
import type { TokenState } from '../src/token/token-manager.js'
import { build, startStandIn } from './helpers/build.js'

const state = (over: Partial<TokenState>): TokenState => ({
  hasValidToken: false,
  expiresAt: undefined,
  everHadToken: false,
  credentialsRejected: false,
  consecutiveFailures: 0,
  lastFailure: undefined,
  nextAttemptAt: undefined,
  ...over
})

t.test('readiness rules', async (t) => {
  const cases: Array<[string, Partial<TokenState>, boolean, boolean]> = [
    ['starting, no token yet', {}, false, false],
    ['token held', { hasValidToken: true, everHadToken: true }, false, true],
    ['IdP down after the first token, token expired: stays ready', { everHadToken: true, consecutiveFailures: 9 }, false, true],
    ['credentials rejected at start', { credentialsRejected: true }, false, false],
    ['credentials rejected, token still valid', { hasValidToken: true, everHadToken: true, credentialsRejected: true }, false, true],
    ['credentials rejected, token gone', { everHadToken: true, credentialsRejected: true }, false, false],
    ['draining', { hasValidToken: true, everHadToken: true }, true, false]
  ]
  for (const [name, over, draining, ready] of cases) t.equal(readiness(state(over), draining).ready, ready, name)
})

t.test('/livez answers at once; /readyz turns 200 with the first token', async (t) => {
  const standIn = await startStandIn(t)
  const { app, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }, {}, { start: false })
  const live = await request(adminUrl + '/livez')
  t.equal(live.statusCode, 200)
  t.same(await live.body.json(), { status: 'ok' })

  const before = await request(adminUrl + '/readyz')
  t.equal(before.statusCode, 503)
  t.match(await before.body.json(), { status: 'not ready', reason: 'waiting for the first access token', token: { valid: false } })

  await app.start()
  const after = await request(adminUrl + '/readyz')
  t.equal(after.statusCode, 200)
  t.match(await after.body.json(), { status: 'ready', token: { valid: true, expiresAt: /^\d{4}-/ } })

  app.drain()
  const draining = await request(adminUrl + '/readyz')
  t.equal(draining.statusCode, 503)
  t.match(await draining.body.json(), { reason: 'shutting down' })
})

t.test('/readyz says why when the credentials are rejected', async (t) => {
  const standIn = await startStandIn(t, { clientSecret: 'the-real-one' })
  const { app, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  // The first rejection is retried at once (a rotation may have raced the request); the second counts.
  while (!app.tokens.state().credentialsRejected) await new Promise((resolve) => setTimeout(resolve, 10))
  const res = await request(adminUrl + '/readyz')
  t.equal(res.statusCode, 503)
  t.match(await res.body.json(), { reason: 'client credentials rejected by the token endpoint', token: { lastFailure: 'rejected' } })
})

t.test('/metrics: Prometheus text with every sidecar metric and the process metrics', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }, { defaultMetrics: true })
  for (const path of ['/v2/store/products/LM358BIDR', '/v2/store/products/NOPE']) {
    const res = await request(proxyUrl + path)
    await res.body.dump()
  }
  const res = await request(adminUrl + '/metrics')
  t.equal(res.statusCode, 200)
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  const text = await res.body.text()
  const value = (line: RegExp) => Number(new RegExp(line.source + ' (\\S+)$', 'm').exec(text)?.[1])
  t.equal(value(/^store_auth_proxy_token_requests_total\{outcome="success"\}/), 1)
  t.equal(value(/^store_auth_proxy_token_request_duration_seconds_count/), 1)
  const expiry = value(/^store_auth_proxy_token_expiry_timestamp_seconds/)
  t.ok(expiry > Date.now() / 1000 + 3000 && expiry <= Date.now() / 1000 + 3600, `expiry ${expiry}`)
  t.equal(value(/^store_auth_proxy_requests_total\{method="GET",status_class="2xx"\}/), 1)
  t.equal(value(/^store_auth_proxy_requests_total\{method="GET",status_class="4xx"\}/), 1)
  t.equal(value(/^store_auth_proxy_request_duration_seconds_count/), 2)
  t.equal(value(/^store_auth_proxy_requests_in_flight/), 0)
  t.match(text, /^process_cpu_user_seconds_total /m)
  t.match(text, /^nodejs_heap_size_used_bytes /m)
  t.notMatch(text, /^store_auth_proxy_(process|nodejs)_/m, 'runtime metrics without the sidecar\'s prefix')
  for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
    // The sidecar's own are prefixed; prom-client's runtime metrics keep their standard names.
    t.match(line, /^(store_auth_proxy_|process_|nodejs_)/, 'every series is the sidecar\'s or a standard runtime one')
  }
})

t.test('an unknown method does not create a new label value', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  const res = await request(proxyUrl + '/x', { method: 'PROPFIND' })
  await res.body.dump()
  t.equal(res.statusCode, 405)
  const text = await (await request(adminUrl + '/metrics')).body.text()
  t.match(text, /store_auth_proxy_requests_total\{method="OTHER",status_class="4xx"\} 1/)
  t.notMatch(text, 'PROPFIND')
})
