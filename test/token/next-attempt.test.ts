// /status's tokenRequests.nextAttemptAt and token.refreshesAt name one instant while the
// refresh is what comes next: shown once, from one reading of the clocks. They once came from
// two monotonic instants a few milliseconds apart (the refresh's, and the timer set for it), and
// differed by as much as the machine was busy; and a forward wall-clock step brought only the
// refresh forward.
import t from 'tap'
import { HOUR, manager, serverError } from './scripted-manager.js'

t.test('the next attempt is the refresh, to the millisecond, also after a forward wall-clock step', async (t) => {
  const { tokens, clock } = manager(t, [{ lifetimeMs: HOUR, latencyMs: 7 }])
  const started = tokens.start()
  await clock.tick(7)
  await started
  const before = tokens.state()
  t.equal(before.nextAttemptAt, before.refreshesAt)
  clock.stepWall(10 * 60_000)
  const after = tokens.state()
  t.equal(after.refreshesAt, before.refreshesAt, 'the wall clock at the request still says when to refresh')
  t.equal(after.nextAttemptAt, after.refreshesAt, 'and the next attempt is that refresh')
})

t.test('a retry pending is shown as such, with no refresh', async (t) => {
  const { tokens, clock } = manager(t, [{ error: serverError() }])
  await tokens.start().catch(() => {})
  const state = tokens.state()
  t.equal(state.refreshesAt, undefined)
  t.ok((state.nextAttemptAt ?? 0) > clock.clock.wallNow(), 'a retry ahead')
})
