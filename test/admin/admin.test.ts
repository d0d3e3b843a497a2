import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { readiness } from '../../src/admin/routes.js'
import type { StatusDocument } from '../../src/admin/status.js'
import type { TokenState } from '../../src/token/token-manager.js'
import { build, CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { startFaultyTokenEndpoint } from '../helpers/faulty-token-endpoint.js'

const state = (over: Partial<TokenState>): TokenState => ({
  hasValidToken: false,
  expiresAt: undefined,
  refreshesAt: undefined,
  generation: undefined,
  info: undefined,
  refreshing: false,
  everHadToken: false,
  credentialsRejected: false,
  consecutiveFailures: 0,
  lastFailure: undefined,
  lastFailureReason: undefined,
  lastFailureAt: undefined,
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
  await eventually(t, 'the credentials rejected', () => app.tokens.state().credentialsRejected)
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
  t.equal(value(/^store_auth_proxy_requests_total\{method="GET",status_class="2xx",outcome="completed"\}/), 1)
  t.equal(value(/^store_auth_proxy_requests_total\{method="GET",status_class="4xx",outcome="completed"\}/), 1)
  t.equal(value(/^store_auth_proxy_request_duration_seconds_count\{status_class="2xx"\}/), 1)
  t.equal(value(/^store_auth_proxy_request_duration_seconds_count\{status_class="4xx"\}/), 1)
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
  t.match(text, /store_auth_proxy_requests_total\{method="OTHER",status_class="4xx",outcome="completed"\} 1/)
  t.notMatch(text, 'PROPFIND')
})

// GET /status on the admin port.

t.test('/status: version, uptime, token state with the answer\'s non-secret fields, readiness, configuration with credential origins', async (t) => {
  const dir = t.testdir({ secret: `${CLIENT_SECRET}\n` })
  const standIn = await startStandIn(t)
  const { adminUrl, app } = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_SECRET: '', CLIENT_SECRET_FILE: join(dir, 'secret')
  }, { version: '1.2.3-test' })
  const res = await request(adminUrl + '/status')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['cache-control'], 'no-store')
  const status = await res.body.json() as StatusDocument
  const now = Date.now()
  t.match(status, {
    version: '1.2.3-test',
    ready: true,
    reason: 'token held',
    token: {
      state: 'held',
      held: true,
      generation: app.tokens.current()?.generation,
      details: { application_name: 'store-auth-proxy-demo', client_id: CLIENT_ID, scope: '', issued_at: /^\d+$/ }
    },
    tokenRequests: { inFlight: false, consecutiveFailures: 0, lastFailure: null, nextAttemptAt: /^\d{4}-/, credentialsRejected: false },
    config: {
      AUTH_URL: standIn.url,
      tokenUrl: standIn.url + '/v1/oauth/accesstoken',
      CLIENT_ID: { variable: 'CLIENT_ID' },
      CLIENT_SECRET: { variable: 'CLIENT_SECRET_FILE', file: join(dir, 'secret') },
      TOKEN_WAIT_MS: 3000
    }
  })
  t.ok(typeof status.uptimeSeconds === 'number' && status.uptimeSeconds >= 0)
  const expires = Date.parse(status.token.expiresAt ?? '')
  const refreshes = Date.parse(status.token.refreshesAt ?? '')
  t.ok(expires > now + 3000_000 && expires <= now + 3600_000, `expiresAt ${status.token.expiresAt} is a wall time about an hour away`)
  t.ok(refreshes < expires && refreshes > now, 'refreshesAt before it')
  t.ok(Math.abs(Date.parse(status.tokenRequests.nextAttemptAt ?? '') - refreshes) <= 2, 'the next attempt is the refresh')
  t.notOk(Object.keys(status.token.details).includes('access_token'))
})

t.test('/status, /readyz and every log line, through every token state, never show the secret nor any token', async (t) => {
  const dir = t.testdir({ secret: `${CLIENT_SECRET}\n` })
  const clock = fakeClock(Date.now())
  const standIn = await startStandIn(t)
  const endpoint = await startFaultyTokenEndpoint(t, standIn.url)
  const { adminUrl, app, logs } = await build(t, {
    AUTH_URL: endpoint.url, UPSTREAM_URL: standIn.url, CLIENT_SECRET: '', CLIENT_SECRET_FILE: join(dir, 'secret'), TOKEN_TIMEOUT_MS: '300'
  }, { clock: clock.clock, random: () => 0.01 }, { start: false })
  const shown: string[] = []
  const tokens = new Set<string>()
  const look = async (expected: Record<string, unknown>, name: string) => {
    const held = app.tokens.current()
    if (held !== undefined) tokens.add(held.authorization.replace('Bearer ', ''))
    const status = await request(adminUrl + '/status')
    const text = await status.body.text()
    const ready = await request(adminUrl + '/readyz')
    shown.push(text, await ready.body.text())
    t.match(JSON.parse(text), expected, name)
  }

  await look({ ready: false, token: { state: 'none', held: false, expiresAt: null } }, 'cold')
  endpoint.setFault('hang')
  const first = app.start()
  await look({ token: { state: 'fetching' }, tokenRequests: { inFlight: true } }, 'fetching the first token')
  await first
  await look({ ready: false, token: { state: 'none' }, tokenRequests: { consecutiveFailures: 1, lastFailure: { outcome: 'timeout', reason: /within 300 ms/, at: /^\d{4}-/ } } }, 'failed')
  endpoint.setFault('ok')
  await app.tokens.start()
  await look({ ready: true, token: { state: 'held', generation: 2 } }, 'held')
  endpoint.setFault('hang')
  const refresh = app.tokens.start()
  await look({ token: { state: 'refreshing', held: true } }, 'refreshing')
  await refresh
  await look({ token: { state: 'held' }, tokenRequests: { lastFailure: { outcome: 'timeout' } } }, 'a failed refresh while held')
  endpoint.setFault('ok')
  const generation = app.tokens.current()?.generation ?? -1
  t.equal(app.tokens.invalidate(generation), true)
  t.ok(await app.tokens.renewed(generation))
  await look({ token: { state: 'held', generation: 4 } }, 'invalidated and renewed')
  endpoint.setFault('invalid_client')
  await app.tokens.start()
  await clock.tick(10)
  await eventually(t, 'the credentials rejected', () => app.tokens.state().credentialsRejected)
  await look({ ready: true, token: { state: 'held' }, tokenRequests: { credentialsRejected: true, lastFailure: { outcome: 'rejected' } } }, 'rejected, token still held')
  clock.stepWall(2 * 3600_000)
  await look({ ready: false, reason: 'client credentials rejected by the token endpoint', token: { state: 'none' } }, 'rejected, token lapsed')

  t.equal(tokens.size, 2, 'the tokens of generations 2 and 4')
  const everything = [...shown, ...logs.lines].join('\n')
  t.ok(logs.lines.length > 5)
  t.notMatch(everything, CLIENT_SECRET, 'never the client secret')
  for (const token of tokens) {
    t.notMatch(everything, token, 'never a token')
    t.notMatch(everything, token.slice(0, 8), 'nor a prefix of one')
  }
  t.match(everything, join(dir, 'secret'), 'the secret shown only as where it comes from')
})
