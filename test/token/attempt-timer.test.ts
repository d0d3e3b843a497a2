// The one pending attempt (a refresh ahead of expiry, or a retry after a failure): replaced by
// the next, forgotten once a request starts or the manager stops, and never shown pending then.
import t from 'tap'
import { AttemptTimer } from '../../src/token/attempt-timer.js'
import { TokenRequestError } from '../../src/token/token-client.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { HOUR, manager } from './scripted-manager.js'

function timerOnFakeClock () {
  const clock = fakeClock()
  let due = 0
  const timer = new AttemptTimer(clock.clock, () => { due += 1 })
  return { clock, timer, due: () => due }
}

t.test('clear(): the pending attempt never comes, and neither its kind nor its instant is kept', async (t) => {
  const { clock, timer, due } = timerOnFakeClock()
  timer.schedule(1000, 'retry')
  t.equal(timer.kind, 'retry')
  t.equal(timer.nextAttemptAt, clock.clock.now() + 1000)
  timer.clear()
  t.equal(timer.kind, undefined)
  t.equal(timer.nextAttemptAt, undefined)
  t.equal(clock.fake.countTimers(), 0, 'the timer is cancelled')
  await clock.tick(2000)
  t.equal(due(), 0)
})

t.test('a timer that fires is no longer pending; its instant stays until the attempt starts', async (t) => {
  const { clock, timer, due } = timerOnFakeClock()
  timer.schedule(1000, 'refresh')
  const at = clock.clock.now() + 1000
  await clock.tick(1000)
  t.equal(due(), 1)
  t.equal(timer.kind, undefined)
  t.equal(timer.nextAttemptAt, at)
})

t.test('schedule() replaces the pending attempt', async (t) => {
  const { clock, timer, due } = timerOnFakeClock()
  timer.schedule(1000, 'refresh')
  timer.schedule(5000, 'retry')
  await clock.tick(4999)
  t.equal(due(), 0, 'the first never fires')
  await clock.tick(1)
  t.equal(due(), 1)
})

t.test('a request under way replaces the pending refresh: none is shown while it runs', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }, 'hang'])
  await tokens.start()
  t.ok(tokens.invalidate(1), 'a 401 to the current token forces a refresh')
  const state = tokens.state()
  t.equal(state.refreshing, true)
  t.equal(state.refreshesAt, undefined)
  t.equal(state.nextAttemptAt, undefined)
  t.equal(clock.fake.countTimers(), 0, 'the refresh timer is cancelled')
})

t.test('stop(): the pending refresh is cancelled and no longer shown', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR }])
  await tokens.start()
  tokens.stop()
  const state = tokens.state()
  t.equal(state.hasValidToken, true, 'the held token stays usable')
  t.equal(state.refreshesAt, undefined)
  t.equal(state.nextAttemptAt, undefined)
  t.equal(clock.fake.countTimers(), 0)
})

t.test('stop() during a retry\'s backoff: no attempt shown, and a caller is told to come back in a second', async (t) => {
  const busy = new TokenRequestError('rate_limited', 'token endpoint answered 429', { statusCode: 429, retryAfterMs: 30_000 })
  const { tokens } = manager(t, [{ error: busy }])
  await tokens.start()
  t.ok((tokens.state().nextAttemptAt ?? 0) > 0, 'a retry is pending, 30 s ahead')
  tokens.stop()
  t.equal(tokens.state().nextAttemptAt, undefined)
  const err = await tokens.get().catch((e: unknown) => e) as { retryAfterSeconds: number }
  t.equal(err.retryAfterSeconds, 1)
})
