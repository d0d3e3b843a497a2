// The token manager at the edges of a token's life and of a failure's backoff: each test
// states one rule, at the instant where it starts to hold.
import t, { type Test } from 'tap'
import { DEMAND_RETRY_INTERVAL_MS } from '../../src/token/token-manager.js'
import { HOUR, manager, serverError } from './scripted-manager.js'

t.test('a fresh token is served from memory: callers send no token request', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  const held = tokens.current()
  for (let minute = 0; minute < 50; minute++) {
    t.equal(await tokens.get(), held)
    await clock.tick(60_000)
  }
  t.equal(endpoint.calls(), 1, '50 minutes of callers, one token request')
})

t.test('the refresh starts when the wall clock reaches the refresh time, not a millisecond later', async (t) => {
  const { tokens, endpoint, clock } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
  await tokens.start()
  const held = tokens.current()
  if (held === undefined) throw new Error('no token')
  // The wall clock 5 ms ahead: it reaches the refresh time before the refresh timer is due.
  clock.stepWall(5)
  await clock.tick(held.refreshAt - clock.clock.now() - 6)
  t.equal(tokens.current(), held)
  t.equal(endpoint.calls(), 1, '1 ms before, by the wall clock')
  await clock.tick(1)
  t.equal(tokens.current(), held, 'still served while the refresh runs')
  t.equal(endpoint.calls(), 2, 'at the refresh time by the wall clock')
})

t.test('a token is not sent at the instant its usable life ends on either clock; the WARN says which clock judged', async (t) => {
  await t.test('the monotonic clock (the wall clock 5 ms behind)', async (t) => {
    const { tokens, clock, logs } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
    await tokens.start()
    const held = tokens.current()
    if (held === undefined) throw new Error('no token')
    clock.stepWall(-5)
    await clock.tick(held.usableUntil - clock.clock.now())
    t.equal(tokens.current(), undefined, 'not at usableUntil')
    t.match(logs.entries().find((e) => e.level === 40), { generation: held.generation, judgedBy: 'monotonic clock' })
  })
  await t.test('the wall clock (5 ms ahead)', async (t) => {
    const { tokens, clock, logs } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
    await tokens.start()
    const held = tokens.current()
    if (held === undefined) throw new Error('no token')
    clock.stepWall(5)
    await clock.tick(held.usableUntil - clock.clock.now() - 5)
    t.equal(clock.clock.wallNow(), held.wallUsableUntil)
    t.equal(tokens.current(), undefined, 'not at wallUsableUntil, 5 ms before the monotonic end')
    t.match(logs.entries().find((e) => e.level === 40), { generation: held.generation, judgedBy: 'wall clock' })
  })
})

// A 2-second token: usable until 1960 ms after its request was sent (the last 2 % are not used).
const SHORT = 2000
const SHORT_USABLE_MS = 1960

t.test('an answer that arrives when its token can no longer be sent is a failure with a backoff, on either clock', async (t) => {
  const expired = async (t: Test, arrive: (clock: ReturnType<typeof manager>['clock']) => Promise<void>, latencyMs: number) => {
    // random 0.5: the first failure's backoff is 250 ms.
    const { tokens, clock, endpoint } = manager(t, [{ lifetimeMs: SHORT, latencyMs }], { random: () => 0.5 })
    void tokens.start()
    await arrive(clock)
    t.match(tokens.state(), {
      hasValidToken: false, lastFailure: 'invalid_response', lastFailureReason: 'token expired before its answer arrived', consecutiveFailures: 1
    })
    t.equal(tokens.current(), undefined)
    await clock.tick(249)
    t.equal(endpoint.calls(), 1, 'not requested again before the backoff')
    await clock.tick(1)
    t.equal(endpoint.calls(), 2, 'requested again after it')
  }
  await t.test('the monotonic clock: at its usable end, the wall clock stepped back meanwhile', async (t) => {
    await expired(t, async (clock) => {
      clock.stepWall(-HOUR)
      await clock.tick(SHORT_USABLE_MS)
    }, SHORT_USABLE_MS)
  })
  await t.test('the wall clock: a suspension during the request brings it to the usable end', async (t) => {
    await expired(t, async (clock) => {
      await clock.tick(500)
      clock.suspend(SHORT_USABLE_MS - 1000)
      await clock.tick(500)
    }, 1000)
  })
  await t.test('1 ms earlier on both clocks it is a token', async (t) => {
    const { tokens, clock } = manager(t, [{ lifetimeMs: SHORT, latencyMs: SHORT_USABLE_MS - 1 }])
    void tokens.start()
    await clock.tick(SHORT_USABLE_MS - 1)
    t.equal(tokens.current()?.authorization, 'Bearer token-1')
  })
})

t.test('the token request failing with something unexpected is a network error, retried with a backoff', async (t) => {
  let calls = 0
  const fetchToken = async () => {
    calls += 1
    throw new TypeError('cannot read properties of undefined')
  }
  const { tokens, clock, logs } = manager(t, [], { fetchToken, random: () => 1 })
  await tokens.start()
  t.match(tokens.state(), { lastFailure: 'network_error', lastFailureReason: 'token request failed unexpectedly', consecutiveFailures: 1 })
  t.match(logs.entries().find((e) => e.msg === 'token request failed'), { outcome: 'network_error', reason: 'token request failed unexpectedly', retryInMs: 500 })
  await clock.tick(499)
  t.equal(calls, 1)
  await clock.tick(1)
  t.equal(calls, 2)
})

t.test('a token that lapses during a failure\'s backoff: callers start at most one request per interval', async (t) => {
  // random 1: a 60 s token is refreshed at 51 s; the refreshes fail at 51, 51.5, 52.5, 54.5
  // and 58.5 s, the next one is due at 66.5 s. The token lapses at 59 s, between them.
  const { tokens, clock, endpoint } = manager(t, [{ lifetimeMs: 60_000 }, { error: serverError() }], { random: () => 1 })
  await tokens.start()
  await clock.tick(59_000 - 1)
  t.ok(tokens.current(), 'served until it lapses')
  t.equal(endpoint.calls(), 6)
  await clock.tick(1)
  t.equal(tokens.current(), undefined, 'lapsed')
  t.equal(endpoint.calls(), 6, 'the lapse starts no request: a retry is pending')
  const refused = await Promise.all(Array.from({ length: 20 }, () => tokens.get().then(() => 'token', (e: { code: string }) => e.code)))
  t.same(new Set(refused), new Set(['TOKEN_UNAVAILABLE']))
  t.equal(endpoint.calls(), 6, 'the last failure was 0.5 s ago: callers wait for the retry')
  await clock.tick(1500)
  await Promise.all(Array.from({ length: 20 }, () => tokens.get().catch(() => undefined)))
  t.equal(endpoint.calls(), 7, `${DEMAND_RETRY_INTERVAL_MS} ms after it, one early attempt for 20 callers`)
})

t.test('callers do not start a retry early when the scheduled one is due within the interval', async (t) => {
  // random 1: failures at 0, 0.5, 1.5 and 3.5 s; the next attempt is due at 7.5 s.
  const { tokens, clock, endpoint } = manager(t, [{ error: serverError() }], { random: () => 1 })
  await tokens.start()
  await clock.tick(3500)
  t.equal(endpoint.calls(), 4)
  // 5.5 s: the last failure was 2 s ago, and the retry is 2 s away, not more.
  await clock.tick(DEMAND_RETRY_INTERVAL_MS)
  await Promise.all(Array.from({ length: 10 }, () => tokens.get().catch(() => undefined)))
  t.equal(endpoint.calls(), 4, 'no early attempt')
  await clock.tick(DEMAND_RETRY_INTERVAL_MS)
  t.equal(endpoint.calls(), 5, 'the scheduled retry')
})

t.test('get() after stop answers 503 at once, even with a request in flight', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 1000 }], { waitMs: 3000 })
  void tokens.start()
  tokens.stop()
  let answer: unknown
  void tokens.get().then((token) => { answer = token }, (err: { code: string }) => { answer = err.code })
  await clock.tick(0)
  t.equal(answer, 'TOKEN_UNAVAILABLE', 'not after the request')
})

t.test('renewed() gives a newer token held at once, even while another request is in flight', async (t) => {
  const { tokens, clock, logs } = manager(t, [{ lifetimeMs: HOUR }, { lifetimeMs: HOUR }, 'hang'], { forcedRefreshIntervalMs: 0 })
  await tokens.start()
  const first = tokens.current()
  if (first === undefined) throw new Error('no token')
  t.equal(tokens.invalidate(first.generation), true)
  await clock.tick(0)
  const second = tokens.current()
  if (second === undefined) throw new Error('no second token')
  t.equal(tokens.invalidate(second.generation), true, 'a 401 to the second token: a request in flight')
  t.equal(tokens.state().refreshing, true)
  let answer: unknown
  void tokens.renewed(first.generation).then((token) => { answer = token })
  await clock.tick(0)
  t.equal(answer, second, 'no wait for the request in flight')
  t.same(logs.entries().filter((e) => e.level === 40).map((e) => e.generation), [first.generation, second.generation],
    'each forced refresh is a WARN naming the generation the upstream refused')
})
