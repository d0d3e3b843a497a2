import t from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { TokenRequestError } from '../../src/token/token-client.js'
import { DEMAND_RETRY_INTERVAL_MS, REJECTED_RETRY_MS, shownTimes, type Token } from '../../src/token/token-manager.js'
import { HOUR, manager, serverError, type Answer } from './scripted-manager.js'

t.test('1000 concurrent callers on a cold manager cause exactly one token request', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 50 }])
  const all = Promise.all(Array.from({ length: 1000 }, () => tokens.get()))
  await clock.tick(50)
  const got = await all
  t.equal(endpoint.calls(), 1)
  t.equal(new Set(got.map((tk) => tk.authorization)).size, 1)
  t.equal(got[0]?.authorization, 'Bearer token-1')
})

t.test('the token is refreshed in the background before expiry, with no traffic', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  t.equal(endpoint.calls(), 1)
  await clock.tick(HOUR - 300_000 - 1)
  t.equal(endpoint.calls(), 1, 'not before the margin')
  await clock.tick(1)
  t.equal(endpoint.calls(), 2, 'refreshed 5 minutes ahead')
  t.equal(tokens.current()?.authorization, 'Bearer token-2')
})

t.test('jitter: two pods started together refresh at different times', async (t) => {
  const a = manager(t, [{ lifetimeMs: HOUR }], { random: () => 0.1 })
  const b = manager(t, [{ lifetimeMs: HOUR }], { random: () => 0.9 })
  await a.tokens.start()
  await b.tokens.start()
  const refreshedAt = async (m: typeof a) => {
    for (let s = 0; s < 3600; s++) {
      await m.clock.tick(1000)
      if (m.endpoint.calls() === 2) return s
    }
    return -1
  }
  const sa = await refreshedAt(a)
  const sb = await refreshedAt(b)
  t.ok(sa > 0 && sb > 0)
  t.ok(Math.abs(sa - sb) >= 60, `refreshes ${sa}s and ${sb}s are at least a minute apart`)
})

t.test('4-second tokens under steady traffic: always a valid token, about one request per lifetime', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: 4000, latencyMs: 20 }], { random: Math.random })
  await clock.tick(0)
  const start = tokens.start()
  await clock.tick(20)
  await start
  let served = 0
  let expiredSent = 0
  let unavailable = 0
  for (let elapsed = 0; elapsed < 120_000; elapsed += 25) {
    await clock.tick(25)
    const token = tokens.current()
    if (token === undefined) {
      unavailable += 1
      continue
    }
    served += 1
    if (clock.clock.now() >= token.expiresAt) expiredSent += 1
  }
  t.equal(expiredSent, 0, 'never an expired token')
  t.equal(unavailable, 0, 'never without a token')
  t.ok(served > 4000)
  const perLifetime = endpoint.calls() / (120_000 / 4000)
  t.ok(perLifetime >= 1 && perLifetime <= 1.2, `token requests per lifetime: ${perLifetime}`)
})

t.test('an expired token is never returned; with no new one the caller gets 503 and Retry-After', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: 60_000 }, { error: serverError() }])
  await tokens.start()
  const token = tokens.current()
  t.ok(token)
  // Past usableUntil, every refresh so far has failed.
  await clock.tick(59_000)
  t.equal(tokens.current(), undefined)
  const err = await tokens.get().catch((e: unknown) => e) as Error & { statusCode: number, code: string, retryAfterSeconds: number }
  t.equal(err.code, 'TOKEN_UNAVAILABLE')
  t.equal(err.statusCode, 503)
  t.ok(err.retryAfterSeconds >= 1 && err.retryAfterSeconds <= 30)
})

t.test('while a valid token is held, failed refreshes are invisible to callers', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { error: serverError() }, { error: serverError() }, { lifetimeMs: HOUR }])
  await tokens.start()
  const first = tokens.current()
  await clock.tick(HOUR - 300_000)
  t.equal(endpoint.calls(), 2)
  t.equal(tokens.current(), first, 'still served after a failed refresh')
  await clock.tick(60_000)
  t.ok(endpoint.calls() >= 4, 'retried with backoff')
  t.equal(tokens.current()?.authorization, 'Bearer token-4')
})

t.test('callers wait a bounded time for a hanging token request, and cause no requests of their own', async (t) => {
  const { tokens, endpoint, clock } = manager(t, ['hang'], { waitMs: 2000 })
  void tokens.start()
  const results = Array.from({ length: 50 }, () => tokens.get().then(() => 'token', (e: { code: string }) => e.code))
  await clock.tick(1999)
  let settled = 0
  for (const r of results) void r.then(() => { settled += 1 })
  await clock.tick(0)
  t.equal(settled, 0, 'still waiting before waitMs')
  await clock.tick(1)
  t.same(new Set(await Promise.all(results)), new Set(['TOKEN_UNAVAILABLE']))
  t.equal(endpoint.calls(), 1)
})

t.test('during an outage 50 failing callers add no token requests', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ error: serverError() }], { random: () => 1 })
  await tokens.start()
  t.equal(endpoint.calls(), 1)
  const results = await Promise.all(Array.from({ length: 50 }, () => tokens.get().catch((e: { retryAfterSeconds: number }) => e)))
  t.equal(endpoint.calls(), 1)
  t.ok(results.every((r) => (r as { retryAfterSeconds: number }).retryAfterSeconds === 1), 'Retry-After: the next attempt, 500 ms away, rounded up')
  await clock.tick(500)
  t.equal(endpoint.calls(), 2, 'the scheduled retry')
})

t.test('waiting callers may start one early attempt per interval, so recovery does not wait out a long backoff', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ error: serverError() }], { random: () => 1 })
  await tokens.start()
  // Grow the backoff: attempts at +0.5 s, +1 s, +2 s, +4 s, +8 s.
  await clock.tick(500 + 1000 + 2000 + 4000 + 8000)
  t.equal(endpoint.calls(), 6)
  t.equal(tokens.state().nextAttemptAt, clock.clock.wallNow() + 16_000, 'the next scheduled attempt is 16 s away')
  await clock.tick(DEMAND_RETRY_INTERVAL_MS)
  await Promise.all(Array.from({ length: 50 }, () => tokens.get().catch(() => undefined)))
  t.equal(endpoint.calls(), 7, '50 waiting callers caused one early attempt')
  await Promise.all(Array.from({ length: 50 }, () => tokens.get().catch(() => undefined)))
  t.equal(endpoint.calls(), 7, 'and no more within the interval')
  await clock.tick(DEMAND_RETRY_INTERVAL_MS)
  await tokens.get().catch(() => undefined)
  t.equal(endpoint.calls(), 8)
})

const proxyRefused = () => new TokenRequestError('proxy_rejected', 'egress proxy refused our credentials (407)')

t.test('no early attempts after a Retry-After or rejected credentials, the endpoint\'s or the egress proxy\'s', async (t) => {
  const limited = new TokenRequestError('rate_limited', 'rate limited', { statusCode: 429, retryAfterMs: 60_000 })
  const rejected = new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' })
  for (const error of [limited, rejected, proxyRefused()]) {
    const { tokens, endpoint, clock } = manager(t, [{ error }])
    await tokens.start()
    await clock.tick(10_000)
    const before = endpoint.calls()
    await Promise.all(Array.from({ length: 10 }, () => tokens.get().catch(() => undefined)))
    t.equal(endpoint.calls(), before, error.outcome)
  }
})

t.test('a Retry-After from the endpoint is honoured', async (t) => {
  const limited = new TokenRequestError('rate_limited', 'rate limited', { statusCode: 429, retryAfterMs: 7000 })
  const { tokens, endpoint, clock } = manager(t, [{ error: limited }, { lifetimeMs: HOUR }], { random: () => 0 })
  await tokens.start()
  await clock.tick(6999)
  t.equal(endpoint.calls(), 1)
  await clock.tick(1)
  t.equal(endpoint.calls(), 2)
  t.ok(tokens.current())
})

t.test('rejected credentials: one quick retry, then one ERROR, slow retries, recovery when fixed', async (t) => {
  const rejected = new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' })
  const { tokens, endpoint, clock, logs } = manager(t, [{ error: rejected }, { error: rejected }, { error: rejected }, { error: rejected }, { lifetimeMs: HOUR }])
  await tokens.start()
  t.equal(tokens.state().credentialsRejected, false, 'not yet: the secret may have been rotated during the request')
  await clock.tick(500)
  t.equal(endpoint.calls(), 2, 'retried at once with the credentials read again')
  t.equal(tokens.state().credentialsRejected, true)
  // Attempts at 0 and 1 ms (the quick retry), then every REJECTED_RETRY_MS: 60 001, 120 001, ...
  await clock.tick(REJECTED_RETRY_MS - 1000)
  t.equal(endpoint.calls(), 2, 'then no fast retry')
  await clock.tick(REJECTED_RETRY_MS + 600)
  t.equal(endpoint.calls(), 4)
  const errors = logs.entries().filter((e) => e.level === 50)
  t.equal(errors.length, 1, 'one ERROR line for the incident')
  t.match(errors[0], { oauthError: 'invalid_client', msg: /rejected the client credentials; check/ })
  await clock.tick(REJECTED_RETRY_MS)
  t.equal(tokens.state().credentialsRejected, false)
  t.ok(tokens.current())
})

t.test('a rejection of a request sent just before a rotation is retried at once and recovers', async (t) => {
  const rejected = new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' })
  const { tokens, endpoint, clock, logs } = manager(t, [{ error: rejected }, { lifetimeMs: HOUR }], { random: () => 1 })
  await tokens.start()
  await clock.tick(500)
  t.equal(endpoint.calls(), 2)
  t.ok(tokens.current())
  t.equal(logs.entries().filter((e) => e.level === 50).length, 0, 'no ERROR for a race with a rotation')
})

for (const [tokenUrl, variable] of [['https://transact.ti.com/v1/oauth/accesstoken', 'HTTPS_PROXY'], ['http://ti.internal/v1/oauth/accesstoken', 'HTTP_PROXY']]) {
  t.test(`the egress proxy refuses our credentials (407): paced like a rejection, one ERROR naming ${variable}, recovery`, async (t) => {
    const answers: Answer[] = [{ error: proxyRefused() }, { error: proxyRefused() }, { error: proxyRefused() }, { error: proxyRefused() }, { lifetimeMs: HOUR }]
    const { tokens, endpoint, clock, logs } = manager(t, answers, { tokenUrl })
    await tokens.start()
    await clock.tick(500)
    t.equal(endpoint.calls(), 2, 'one quick retry (the proxy\'s authentication may have failed in passing)')
    await clock.tick(REJECTED_RETRY_MS - 1000)
    t.equal(endpoint.calls(), 2, 'then no fast retries')
    await Promise.all(Array.from({ length: 10 }, () => tokens.get().catch(() => undefined)))
    t.equal(endpoint.calls(), 2, 'nor early attempts by waiting callers')
    await clock.tick(REJECTED_RETRY_MS + 600)
    t.equal(endpoint.calls(), 4, 'one attempt per REJECTED_RETRY_MS')
    t.match(tokens.state(), { lastFailure: 'proxy_rejected', credentialsRejected: false }, 'not the token endpoint\'s rejection')
    const errors = logs.entries().filter((e) => e.level === 50)
    t.equal(errors.length, 1, 'one ERROR line for the incident')
    t.match(errors[0], { url: tokenUrl, reason: 'egress proxy refused our credentials (407)', msg: `egress proxy refused our credentials; check the user and password in ${variable}` })
    await clock.tick(REJECTED_RETRY_MS)
    t.ok(tokens.current())
    t.ok(logs.entries().some((e) => e.msg === 'egress proxy accepts our credentials again'))
  })
}

t.test('refusals by the endpoint and the proxy in turn: one quick retry for the run, not one per kind', async (t) => {
  const rejected = new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' })
  const { tokens, endpoint, clock, logs } = manager(t, [{ error: rejected }, { error: proxyRefused() }, { error: rejected }, { error: proxyRefused() }])
  await tokens.start()
  await clock.tick(500)
  t.equal(endpoint.calls(), 2)
  await clock.tick(REJECTED_RETRY_MS - 1000)
  t.equal(endpoint.calls(), 2, 'the proxy\'s refusal after the endpoint\'s is not retried fast')
  await clock.tick(REJECTED_RETRY_MS + 600)
  t.equal(endpoint.calls(), 4)
  t.same(logs.entries().filter((e) => e.level === 50).map((e) => (e.msg as string).split(';')[0]),
    ['egress proxy refused our credentials', 'token endpoint rejected the client credentials'], 'one ERROR for each that refused')
  t.equal(tokens.state().credentialsRejected, true)
})

t.test('a refusal after another failure starts a new run: retried at once', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ error: proxyRefused() }, { error: serverError() }, { error: proxyRefused() }, { lifetimeMs: HOUR }], { random: () => 1 })
  await tokens.start()
  await clock.tick(500)
  t.equal(endpoint.calls(), 2, 'the quick retry')
  await clock.tick(1000)
  t.equal(endpoint.calls(), 3, 'the server error\'s backoff (1 s at the second failure)')
  await clock.tick(500)
  t.equal(endpoint.calls(), 4, 'a new run of refusals: retried at once again')
  t.ok(tokens.current())
})

t.test('invalidate: 20 concurrent 401s on one generation cause one refresh', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 10 }])
  const start = tokens.start()
  await clock.tick(10)
  await start
  const old = tokens.current()
  if (old === undefined) throw new Error('no token')
  const replays = Array.from({ length: 20 }, async () => {
    if (!tokens.invalidate(old.generation)) return undefined
    return await tokens.renewed(old.generation)
  })
  await clock.tick(10)
  const fresh = await Promise.all(replays)
  t.equal(endpoint.calls(), 2)
  t.ok(fresh.every((tk) => tk?.authorization === 'Bearer token-2'))
})

t.test('invalidate: a stale generation does not drop the current token', async (t) => {
  const { tokens, endpoint } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  const current = tokens.current()
  t.equal(tokens.invalidate((current?.generation ?? 0) - 1), true)
  t.equal(tokens.current(), current)
  t.equal(endpoint.calls(), 1)
})

t.test('invalidate: forced refreshes are rate-limited', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }], { forcedRefreshIntervalMs: 10_000 })
  await tokens.start()
  t.equal(tokens.invalidate(tokens.current()?.generation ?? -1), true)
  await clock.tick(0)
  await tokens.get()
  t.equal(endpoint.calls(), 2)
  t.equal(tokens.invalidate(tokens.current()?.generation ?? -1), false, 'second forced refresh within the interval refused')
  t.ok(tokens.current(), 'and the token is kept')
  t.equal(endpoint.calls(), 2)
  await clock.tick(10_000)
  t.equal(tokens.invalidate(tokens.current()?.generation ?? -1), true)
  await clock.tick(0)
  t.equal(endpoint.calls(), 3)
})

t.test('a token that expired before its answer arrived is not used', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: 2000, latencyMs: 2500 }, { lifetimeMs: HOUR }])
  void tokens.start()
  await clock.tick(2500)
  t.equal(tokens.current(), undefined)
  t.equal(tokens.state().lastFailure, 'invalid_response')
  await clock.tick(1000)
  t.equal(endpoint.calls(), 2)
  t.ok(tokens.current())
})

t.test('stop cancels the refresh timer', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: 60_000 }])
  await tokens.start()
  tokens.stop()
  await clock.tick(HOUR)
  t.equal(endpoint.calls(), 1)
})

// Lifetimes on a monotonic clock. The fake clock moves its
// monotonic and wall readings independently (test/helpers/fake-clock.ts).

t.test('monotonic lifetimes: a forward wall-clock step past expiry fetches a new token at once, no 503', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 20 }])
  await tokens.start()
  await clock.tick(60_000)
  clock.stepWall(2 * HOUR)
  t.equal(tokens.current(), undefined, 'the wall clock says the token has expired: it is not sent')
  t.equal(endpoint.calls(), 2, 'a request started at once, not behind the pending refresh timer')
  const got = tokens.get()
  await clock.tick(20)
  t.equal((await got).authorization, 'Bearer token-2', 'the caller waited for it: no TOKEN_UNAVAILABLE')
  t.ok((tokens.state().expiresAt ?? 0) > clock.clock.wallNow() + HOUR - 60_000, 'expiry shown on the new wall clock')
  // token-2 was requested 20 ms before it arrived: its refresh is due 55 min after that.
  await clock.tick(HOUR - 300_000 - 21)
  t.equal(endpoint.calls(), 2, 'then the usual refresh schedule')
  await clock.tick(1)
  t.equal(endpoint.calls(), 3)
})

t.test('monotonic lifetimes: a small forward step keeps the token, with at most an earlier refresh', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  const held = tokens.current()
  clock.stepWall(10 * 60_000)
  t.equal(tokens.current(), held)
  t.equal(endpoint.calls(), 1, 'no request for a step the token outlives')
  await clock.tick(HOUR - 300_000 - 10 * 60_000)
  t.equal(tokens.current(), held, 'still served')
  t.equal(endpoint.calls(), 2, 'refreshed when the wall clock reached the refresh time')
})

t.test('monotonic lifetimes: a backward wall-clock step changes nothing but the times shown', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  const held = tokens.current()
  const shown = tokens.state().expiresAt ?? 0
  clock.stepWall(-2 * HOUR)
  t.equal(tokens.current(), held)
  t.equal(tokens.state().expiresAt, shown - 2 * HOUR, 'the expiry is shown on the stepped wall clock')
  t.equal(tokens.state().refreshesAt, (tokens.state().expiresAt ?? 0) - 300_000, 'and so is the refresh')
  await clock.tick(HOUR - 300_000 - 1)
  t.equal(endpoint.calls(), 1, 'the refresh is not delayed by two hours, nor advanced')
  t.equal(tokens.current(), held)
  await clock.tick(1)
  t.equal(endpoint.calls(), 2)
  t.equal(tokens.current()?.authorization, 'Bearer token-2')
})

t.test('monotonic lifetimes: after a long suspension (monotonic clock and timers stood still) the token is not sent', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 20 }])
  await tokens.start()
  clock.suspend(2 * HOUR)
  t.equal(tokens.current(), undefined, 'expired by the gateway\'s time although the monotonic clock did not move')
  t.equal(endpoint.calls(), 2, 'and a request started at once')
  const got = tokens.get()
  await clock.tick(20)
  t.equal((await got).authorization, 'Bearer token-2')
})

t.test('monotonic lifetimes: a suspension into the refresh margin refreshes at once and keeps serving meanwhile', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 20 }])
  await tokens.start()
  const held = tokens.current()
  await clock.tick(50 * 60_000)
  clock.suspend(7 * 60_000)
  t.equal(tokens.current(), held, 'still valid for two minutes')
  t.equal(endpoint.calls(), 2, 'but its refresh time has passed by the wall clock: refreshing now')
  await clock.tick(20)
  t.equal(tokens.current()?.authorization, 'Bearer token-2')
})

t.test('monotonic lifetimes: a refresh timer that fires late (event loop blocked) never leaves a lapsed token in use', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 20 }])
  await tokens.start()
  const release = clock.block(HOUR)
  t.equal(tokens.current(), undefined, 'lapsed although its refresh timer has not fired yet')
  t.equal(endpoint.calls(), 2, 'a request started at once')
  release()
  await clock.tick(20)
  t.equal(endpoint.calls(), 2, 'the late timer adds no second request')
  t.equal(tokens.current()?.authorization, 'Bearer token-2')
})

t.test('no usable token, nothing in flight, only the refresh timer pending: get() starts a request at once', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR }])
  await tokens.start()
  clock.suspend(HOUR)
  const got = await tokens.get()
  t.equal(got.authorization, 'Bearer token-2')
  t.equal(endpoint.calls(), 2)
})

// One upstream 401 must not throw away a valid token.

t.test('401 with the token endpoint down: the held token is kept and served; renewed() gives undefined', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, { error: serverError(), latencyMs: 10 }], { random: () => 1 })
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  t.equal(tokens.invalidate(held.generation), true, 'a refresh started: a replay may bring another token')
  t.equal(endpoint.calls(), 2)
  t.equal(tokens.current(), held, 'kept while the refresh runs')
  const renewal = tokens.renewed(held.generation)
  await clock.tick(10)
  t.equal(await renewal, undefined, 'the refresh failed: no newer token')
  t.equal(tokens.current(), held, 'kept after the refresh failed')
  t.equal(await tokens.get(), held, 'get() serves it')
  t.equal(tokens.invalidate(held.generation), false, 'a second 401 within the interval forces nothing and may not replay')
  await clock.tick(30 * 60_000)
  t.equal(await tokens.get(), held, 'callers keep getting the held token until it really expires')
  t.equal(tokens.state().hasValidToken, true)
})

t.test('401 and a refresh that succeeds: renewed() gives the new token; current() switches only when it arrives', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 10 }])
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  t.equal(tokens.invalidate(held.generation), true)
  const renewal = tokens.renewed(held.generation)
  await clock.tick(5)
  t.equal(tokens.current(), held)
  await clock.tick(5)
  const fresh = await renewal
  t.equal(fresh?.authorization, 'Bearer token-2')
  t.ok((fresh?.generation ?? 0) > held.generation)
  t.equal(tokens.current(), fresh)
  t.equal(await tokens.renewed(held.generation), fresh, 'at once when a newer token is already held')
  t.equal(tokens.invalidate(held.generation), true, 'a 401 to the old generation: a newer token is held')
})

t.test('renewed(): undefined when nothing is in flight, or after waitMs; it never rejects', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, 'hang'], { waitMs: 2000 })
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  t.equal(await tokens.renewed(held.generation), undefined, 'nothing in flight')
  tokens.invalidate(held.generation)
  const renewal = tokens.renewed(held.generation)
  await clock.tick(2000)
  t.equal(await renewal, undefined, 'the refresh hangs: given up after waitMs')
  t.equal(tokens.current(), held)
  tokens.stop()
  t.equal(await tokens.renewed(held.generation), undefined, 'stopped: undefined, not a rejection')
})

// The URL asked and the variables in use are named.

t.test('token-request failures name the token URL; the rejection ERROR names the variables in use', async (t) => {
  const rejected = new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' })
  const notFound = new TokenRequestError('http_error', 'token endpoint answered 404', { statusCode: 404 })
  const url = 'https://transact.example/v1/oauth/accesstoken/v1/oauth/accesstoken'
  const { tokens, clock, logs } = manager(t, [{ error: notFound }, { error: rejected }], {
    tokenUrl: url,
    credentials: { clientId: { variable: 'CLIENT_ID' }, clientSecret: { variable: 'CLIENT_SECRET_FILE', file: '/run/secrets/client-secret' } }
  })
  await tokens.start()
  t.match(logs.entries().find((e) => e.msg === 'token request failed'), { url, statusCode: 404, reason: 'token endpoint answered 404' })
  await clock.tick(30_000)
  await clock.tick(30_000)
  const error = logs.entries().find((e) => e.level === 50)
  t.match(error, { url, credentials: ['CLIENT_ID', 'CLIENT_SECRET_FILE'], msg: 'token endpoint rejected the client credentials; check CLIENT_ID and CLIENT_SECRET_FILE (/run/secrets/client-secret)' })
  t.notMatch(logs.text(), /check CLIENT_ID and CLIENT_SECRET[^_]/)
})

t.test('state(): wall-clock display times, generation, the answer\'s non-secret fields, the last failure', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, { error: serverError() }])
  await tokens.start()
  const wall = clock.clock.wallNow()
  t.match(tokens.state(), {
    hasValidToken: true,
    expiresAt: wall + HOUR,
    refreshesAt: wall + HOUR - 300_000,
    generation: 1,
    info: { application_name: 'demo-app', client_id: 'demo-client' },
    refreshing: false,
    lastFailure: undefined
  })
  await clock.tick(HOUR - 300_000)
  t.match(tokens.state(), {
    hasValidToken: true,
    refreshesAt: undefined,
    consecutiveFailures: 1,
    lastFailure: 'server_error',
    lastFailureReason: 'token endpoint failed (500)',
    lastFailureAt: clock.clock.wallNow()
  })
  t.ok((tokens.state().nextAttemptAt ?? 0) > clock.clock.wallNow())
})

// What the manager promises at its edges: each test states one rule of the contract.

t.test('a token past its monotonic usable life is not sent, even with the wall clock stepped back', async (t) => {
  const { tokens, clock, logs } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
  await tokens.start()
  clock.stepWall(-2 * HOUR)
  await clock.tick(HOUR)
  t.equal(tokens.current(), undefined, 'the monotonic clock says it lapsed; the wall clock alone would keep it')
  t.equal(tokens.state().hasValidToken, false)
  t.match(logs.entries().find((e) => e.level === 40), { generation: 1, judgedBy: 'monotonic clock' }, 'the WARN says which clock')
})

t.test('a token lapsed by the wall clock alone (a suspension) says so; the acquired line gives the times', async (t) => {
  const { tokens, clock, logs } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
  await tokens.start()
  t.match(logs.entries().find((e) => e.msg === 'access token acquired'), { generation: 1, expiresInS: 3600, refreshInS: 3300 })
  clock.suspend(2 * HOUR)
  t.equal(tokens.current(), undefined)
  t.match(logs.entries().find((e) => e.level === 40), { generation: 1, judgedBy: 'wall clock' })
})

t.test('everHadToken: false until a token arrives, then true even once it lapses', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: 60_000 }, 'hang'])
  t.equal(tokens.state().everHadToken, false)
  await tokens.start()
  t.equal(tokens.state().everHadToken, true)
  await clock.tick(60_000)
  t.same([tokens.state().hasValidToken, tokens.state().everHadToken], [false, true])
})

t.test('refreshing: true exactly while a token request is in flight', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 100 }])
  t.equal(tokens.state().refreshing, false)
  const started = tokens.start()
  t.equal(tokens.state().refreshing, true)
  await clock.tick(100)
  await started
  t.equal(tokens.state().refreshing, false)
})

t.test('every wait for a request in flight is bounded afresh: a second wait gets the second token', async (t) => {
  const { tokens, clock, endpoint } = manager(t, [{ lifetimeMs: 60_000, latencyMs: 100 }, { lifetimeMs: HOUR, latencyMs: 100 }])
  const first = tokens.get()
  await clock.tick(100)
  t.equal((await first).authorization, 'Bearer token-1')
  // The first token lapses with its refresh not yet due; the next caller waits for a new one.
  clock.stepWall(2 * HOUR)
  const second = tokens.get()
  await clock.tick(100)
  t.equal((await second).authorization, 'Bearer token-2', 'waited for the request in flight, not a 503')
  t.equal(endpoint.calls(), 2)
})

t.test('the 503 with no token says when the next attempt is due (Retry-After in whole seconds, at least 1)', async (t) => {
  const limited = new TokenRequestError('rate_limited', 'token endpoint rate-limited the request (429)', { statusCode: 429, retryAfterMs: 30_000 })
  const { tokens, clock } = manager(t, [{ error: limited }])
  await tokens.start()
  const err = await tokens.get().catch((e: unknown) => e) as { retryAfterSeconds: number }
  t.equal(err.retryAfterSeconds, 30)
  await clock.tick(29_500)
  const later = await tokens.get().catch((e: unknown) => e) as { retryAfterSeconds: number }
  t.equal(later.retryAfterSeconds, 1, 'rounded up, never 0')
})

t.test('an answer that arrives after its usable life is a failure, retried after a backoff, not at once', async (t) => {
  const { tokens, clock, endpoint } = manager(t, [{ lifetimeMs: 2000, latencyMs: 2500 }], { random: () => 0.5 })
  void tokens.start()
  await clock.tick(2500)
  t.equal(tokens.current(), undefined)
  t.equal(tokens.state().lastFailure, 'invalid_response')
  await clock.tick(200)
  t.equal(endpoint.calls(), 1, 'no request loop against a slow endpoint')
  t.equal(tokens.state().consecutiveFailures, 1)
})

t.test('a 401 concerns a token only if it is still the current one: another generation starts no refresh', async (t) => {
  const { tokens, endpoint } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  t.equal(tokens.invalidate(held.generation + 1), false, 'a generation never issued')
  t.equal(tokens.state().refreshing, false)
  t.equal(endpoint.calls(), 1)
})

t.test('the token-expiry gauge is 0 once the token has lapsed', async (t) => {
  const metrics = createMetrics({ defaultMetrics: false })
  const { tokens, clock } = manager(t, [{ lifetimeMs: 60_000 }, 'hang'], { metrics })
  await tokens.start()
  const value = async (): Promise<number | undefined> => (await metrics.tokenExpiry.get()).values[0]?.value
  t.equal(await value(), (clock.clock.wallNow() + 60_000) / 1000)
  await clock.tick(60_000)
  t.equal(tokens.current(), undefined)
  t.equal(await value(), 0)
})

t.test('stopped: nothing starts another token request, whatever is in flight or due', async (t) => {
  const answers: Array<[string, Answer]> = [['an answer', { lifetimeMs: 60_000, latencyMs: 100 }], ['a failure', { error: serverError(), latencyMs: 100 }]]
  for (const [what, answer] of answers) {
    await t.test(`${what} that arrives after stop schedules no other request`, async (t) => {
      const { tokens, clock, endpoint } = manager(t, [answer])
      const started = tokens.start()
      tokens.stop()
      await clock.tick(100)
      await started
      t.equal(tokens.state().nextAttemptAt, undefined)
      await clock.tick(HOUR)
      t.equal(endpoint.calls(), 1)
    })
  }
  await t.test('start and get after stop send nothing; get answers 503', async (t) => {
    const { tokens, endpoint } = manager(t, [{ lifetimeMs: HOUR }])
    tokens.stop()
    await tokens.start()
    const err = await tokens.get().catch((e: unknown) => e) as { code: string }
    t.equal(err.code, 'TOKEN_UNAVAILABLE')
    t.equal(endpoint.calls(), 0)
  })
  await t.test('a token that lapses or falls due by the wall clock after stop is not replaced', async (t) => {
    const { tokens, clock, endpoint } = manager(t, [{ lifetimeMs: HOUR }])
    await tokens.start()
    tokens.stop()
    clock.stepWall(HOUR - 200_000)
    t.ok(tokens.current(), 'in its refresh window by the wall clock, still served')
    await clock.tick(HOUR)
    t.equal(tokens.current(), undefined, 'lapsed')
    t.equal(endpoint.calls(), 1)
  })
  await t.test('a 401 after stop starts no refresh, and renewed() does not wait', async (t) => {
    const { tokens, endpoint } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
    await tokens.start()
    const held = tokens.current()
    if (held === undefined) throw new Error('no token')
    tokens.stop()
    t.equal(tokens.invalidate(held.generation), false)
    t.equal(endpoint.calls(), 1)
  })
  await t.test('renewed() after stop answers at once, even with a request in flight', async (t) => {
    const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR, latencyMs: 5000 }], { waitMs: 10_000 })
    await tokens.start()
    const held = tokens.current()
    if (held === undefined) throw new Error('no token')
    tokens.invalidate(held.generation)
    tokens.stop()
    let answered = false
    const renewal = tokens.renewed(held.generation).then((token) => { answered = true; return token })
    await clock.tick(0)
    t.equal(answered, true, 'not after the request or waitMs')
    t.equal(await renewal, undefined)
  })
})

t.test('shownTimes: monotonic instants carried to the wall clock, or the wall reading if earlier; none without a token', async (t) => {
  const held = { expiresAt: 10_000, wallExpiresAt: 1_000_010_000, wallRefreshAt: 1_000_008_000 } as unknown as Token
  // Wall minus monotonic is 1e9: both readings agree.
  t.same(shownTimes(held, 8_000, 1_000_000_000), { expiresAt: 1_000_010_000, refreshesAt: 1_000_008_000 })
  // The wall clock ran on alone (a suspension): the wall-clock readings come first.
  t.same(shownTimes(held, 8_000, 1_000_500_000), { expiresAt: 1_000_010_000, refreshesAt: 1_000_008_000 })
  // The wall clock was stepped back: the monotonic instants, carried over, come first.
  t.same(shownTimes(held, 8_000.4, 999_000_000), { expiresAt: 999_010_000, refreshesAt: 999_008_000 })
  t.same(shownTimes(held, undefined, 1_000_000_000), { expiresAt: 1_000_010_000, refreshesAt: undefined }, 'no refresh pending')
  t.same(shownTimes(undefined, 8_000, 1_000_000_000), { expiresAt: undefined, refreshesAt: undefined })
})

t.test('every token request is counted by outcome, with its duration', async (t) => {
  const metrics = createMetrics({ defaultMetrics: false })
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 250 }, { error: serverError(), latencyMs: 500 }], { metrics })
  const first = tokens.start()
  await clock.tick(250)
  await first
  await clock.tick(HOUR - 300_000 - 250)
  await clock.tick(500)
  const counts = Object.fromEntries((await metrics.tokenRequests.get()).values.map((v) => [v.labels.outcome, v.value]))
  t.same(counts, { success: 1, server_error: 1 })
  const sum = (await metrics.tokenRequestDuration.get()).values.find((v) => v.metricName?.endsWith('_sum'))?.value
  t.equal(sum, 0.75, 'seconds from send to answer, on the monotonic clock')
})

t.test('usable until, not at: the token is not served at the instant its usable life ends', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  await clock.tick(held.usableUntil - clock.clock.now() - 1)
  t.ok(tokens.current(), 'served 1 ms before')
  await clock.tick(1)
  t.equal(tokens.current(), undefined, 'not at usableUntil')
})
