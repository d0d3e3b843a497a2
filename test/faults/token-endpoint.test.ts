import { join } from 'node:path'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { DEMAND_RETRY_INTERVAL_MS, REJECTED_RETRY_MS } from '../../src/token/token-manager.js'
import { build, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { startFaultyTokenEndpoint, type Fault } from '../helpers/faulty-token-endpoint.js'

// Small random draws keep the real-time backoff short: 5 ms, 10 ms, 20 ms, ... capped at 300 ms.
const quickBackoff = () => 0.01

async function setup (t: Test, fault: Fault, env: Record<string, string> = {}, deps = {}) {
  const standIn = await startStandIn(t)
  const endpoint = await startFaultyTokenEndpoint(t, standIn.url)
  endpoint.setFault(fault)
  const built = await build(t, { AUTH_URL: endpoint.url, UPSTREAM_URL: standIn.url, TOKEN_WAIT_MS: '300', ...env },
    { random: quickBackoff, ...deps }, { start: false })
  void built.app.start()
  return { ...built, standIn, endpoint }
}

async function get (url: string) {
  const started = Date.now()
  const res = await request(url)
  const body = await res.body.text()
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], body, ms: Date.now() - started }
}

for (const fault of ['error500', 'garbage', 'hang'] as const) {
  t.test(`token endpoint ${fault}: fast 503s, few token requests, recovery on the next attempt`, async (t) => {
    const { proxyUrl, adminUrl, endpoint, logs } = await setup(t, fault, { TOKEN_TIMEOUT_MS: '150' })
    // Seven failures in, the backoff has reached its cap here (300 ms; see quickBackoff).
    await eventually(t, '8 token requests', () => endpoint.requests() >= 8, 20_000)

    const before = endpoint.requests()
    const started = Date.now()
    const answers = await Promise.all(Array.from({ length: 50 }, async () => await get(proxyUrl + '/v2/store/products/LM358BIDR')))
    const elapsedMs = Date.now() - started
    t.ok(answers.every((a) => a.status === 503 && /^\d+$/.test(String(a.retryAfter))), '50 callers get 503 with Retry-After')
    // Generous: a loaded CI machine is slow, but nobody waits for an idle or upstream timeout.
    t.ok(answers.every((a) => a.ms < 5000), 'quickly')
    t.same(JSON.parse(answers[0]?.body ?? '{}'), { error: 'TOKEN_UNAVAILABLE', message: 'no valid access token is available; retry later' })
    // Meanwhile the scheduled retries go on (their backoff is at most 300 ms here), and
    // the callers may add one early attempt per DEMAND_RETRY_INTERVAL_MS, not one each.
    const allowed = Math.ceil(elapsedMs / 300) + Math.ceil(elapsedMs / DEMAND_RETRY_INTERVAL_MS) + 1
    const added = endpoint.requests() - before
    t.ok(added <= allowed, `${added} token requests in ${elapsedMs} ms (at most ${allowed}), for 50 callers`)

    const notReady = await request(adminUrl + '/readyz')
    t.equal(notReady.statusCode, 503)
    await notReady.body.dump()

    endpoint.setFault('ok')
    await eventually(t, 'ready', async () => (await get(adminUrl + '/readyz')).status === 200)
    t.equal((await get(proxyUrl + '/v2/store/products/LM358BIDR')).status, 200)
    t.notMatch(logs.text(), CLIENT_SECRET)
  })
}

t.test('while a valid token is held, an outage is invisible to callers', async (t) => {
  const { proxyUrl, endpoint, app } = await setup(t, 'ok')
  await eventually(t, 'a token held', () => app.tokens.current() !== undefined)
  endpoint.setFault('error500')
  const generation = app.tokens.current()?.generation ?? -1
  // Force refresh attempts during the outage.
  for (let i = 0; i < 3; i++) await app.tokens.start()
  t.equal(app.tokens.current()?.generation, generation, 'the held token is still served')
  const answers = await Promise.all(Array.from({ length: 20 }, async () => await get(proxyUrl + '/v2/store/products/LM358BIDR')))
  t.ok(answers.every((a) => a.status === 200))
})

t.test('429 with Retry-After: the next attempt waits the seconds it says', async (t) => {
  // On a fake clock: the 2 s are moved, not waited. The backoff's own draw is a few ms
  // (quickBackoff), so only the Retry-After can hold the retry back.
  const clock = fakeClock(Date.now())
  const { endpoint, app } = await setup(t, 'rate_limited', {}, { clock: clock.clock })
  await eventually(t, 'the 429 answered and the retry scheduled', () => {
    const state = app.tokens.state()
    return state.lastFailure === 'rate_limited' && !state.refreshing && state.nextAttemptAt !== undefined
  })
  endpoint.setFault('ok')
  await clock.tick(1999)
  // A retry that had started would be in flight (refreshing) or done (a token held).
  const early = app.tokens.state()
  t.same({ refreshing: early.refreshing, hasValidToken: early.hasValidToken, requests: endpoint.requests() },
    { refreshing: false, hasValidToken: false, requests: 1 }, 'no second attempt within the 2 s the 429 said (Retry-After: 2)')
  await clock.tick(1)
  await eventually(t, 'a token held once the 2 s are over', () => app.tokens.current() !== undefined)
  t.same(endpoint.arrivals.map((a) => a.fault), ['rate_limited', 'ok'], 'one attempt, then the retry')
})

t.test('401 invalid_client: one quick retry, one ERROR with the code, not ready, slow retries, no crash, ready once fixed', async (t) => {
  const clock = fakeClock(Date.now())
  const { adminUrl, endpoint, logs, app } = await setup(t, 'invalid_client', {}, { clock: clock.clock })
  await eventually(t, 'the first token request', () => endpoint.requests() === 1)
  await clock.tick(5) // the one quick retry (credentials read again, in case of a rotation)
  await eventually(t, 'the quick retry', () => endpoint.requests() === 2)
  await eventually(t, 'an ERROR line', () => logs.entries().some((e) => e.level === 50))
  const ready = await request(adminUrl + '/readyz')
  t.equal(ready.statusCode, 503)
  t.match(await ready.body.json(), { reason: 'client credentials rejected by the token endpoint' })

  await clock.tick(REJECTED_RETRY_MS - 1000)
  t.equal(endpoint.requests(), 2, 'no fast retries')
  await clock.tick(1000)
  await eventually(t, 'the slow retry, answered and handled', () => endpoint.requests() === 3 && app.tokens.state().consecutiveFailures === 3)
  const errors = logs.entries().filter((e) => e.level === 50)
  t.equal(errors.length, 1, 'one ERROR for the incident')
  t.match(errors[0], { oauthError: 'invalid_client', statusCode: 401, msg: /rejected the client credentials/ })
  t.notMatch(logs.text(), CLIENT_SECRET)

  endpoint.setFault('ok')
  await clock.tick(REJECTED_RETRY_MS)
  await eventually(t, 'ready', async () => (await get(adminUrl + '/readyz')).status === 200)
})

t.test('the same token returned twice after a revocation: passed back as 401, no loop', async (t) => {
  const { proxyUrl, endpoint, app, standIn } = await setup(t, 'ok')
  await eventually(t, 'a token held', () => app.tokens.current() !== undefined)
  endpoint.setFault('same_token')
  standIn.revokeAll()
  const answer = await get(proxyUrl + '/v2/store/products/LM358BIDR')
  t.equal(answer.status, 401, 'the replay with the same (revoked) token fails, and that 401 goes back')
  t.match(JSON.parse(answer.body), { fault: { faultstring: 'Access Token expired' } })
  t.equal(endpoint.requests(), 2, 'one forced refresh')
  const again = await Promise.all(Array.from({ length: 10 }, async () => await get(proxyUrl + '/v2/store/products/LM358BIDR')))
  t.ok(again.every((a) => a.status === 401))
  t.equal(endpoint.requests(), 2, 'forced refreshes are rate-limited')
})

t.test('a token endpoint that answers 404: the failure log names the URL asked, never a credential', async (t) => {
  const standIn = await startStandIn(t)
  // A wrong AUTH_URL path: the stand-in answers 404 there.
  const { app, logs } = await build(t, { AUTH_URL: standIn.url + '/oauth', UPSTREAM_URL: standIn.url }, { random: quickBackoff })
  t.equal(app.tokens.state().lastFailure, 'http_error')
  const failure = logs.entries().find((e) => e.msg === 'token request failed')
  t.match(failure, { url: standIn.url + '/oauth/v1/oauth/accesstoken', statusCode: 404, reason: 'token endpoint answered 404' })
  t.notMatch(logs.text(), CLIENT_SECRET)
})

t.test('credentials rejected with CLIENT_SECRET_FILE in use: the ERROR names CLIENT_SECRET_FILE and its path', async (t) => {
  const dir = t.testdir({ secret: 'not-the-secret\n' })
  const clock = fakeClock(Date.now())
  const standIn = await startStandIn(t)
  const { app, logs } = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_SECRET: '', CLIENT_SECRET_FILE: join(dir, 'secret')
  }, { clock: clock.clock, random: quickBackoff })
  await clock.tick(10) // the one quick retry
  await eventually(t, 'the credentials rejected', () => app.tokens.state().credentialsRejected)
  const error = logs.entries().find((e) => e.level === 50)
  t.match(error, {
    url: standIn.url + '/v1/oauth/accesstoken',
    credentials: ['CLIENT_ID', 'CLIENT_SECRET_FILE'],
    msg: `token endpoint rejected the client credentials; check CLIENT_ID and CLIENT_SECRET_FILE (${join(dir, 'secret')})`
  })
  t.notMatch(logs.text(), 'not-the-secret')
})
