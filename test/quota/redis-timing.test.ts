// How long Redis has left a script unanswered (redis-backend.ts redisTiming): the refusal of
// late sends reads it. Redis answers one connection in order, so an answer settles every
// script sent before it, and only those.
import t from 'tap'
import { redisTiming } from '../../src/quota/redis-backend.js'
import { fakeClock } from '../helpers/fake-clock.js'

/** A reply the test settles. */
function reply () {
  let settle: (ok: boolean) => void = () => {}
  const promise = new Promise<string>((resolve, reject) => { settle = (ok) => { ok ? resolve('ok') : reject(new Error('Command timed out')) } })
  return { promise, settle }
}

t.test('the oldest script not known answered: an answer settles those sent before it, not after', async (t) => {
  const c = fakeClock()
  const timing = redisTiming(c.clock, 200)
  t.equal(timing.unansweredFor(), 0, 'none sent')
  const take = reply()
  const taken = timing.answered(take.promise)
  await c.tick(100)
  const heartbeat = reply()
  const beat = timing.answered(heartbeat.promise).catch(() => 'failed')
  await c.tick(50)
  t.equal(timing.unansweredFor(), 150, 'the take, sent 150 ms ago')
  take.settle(true)
  await taken
  t.equal(timing.unansweredFor(), 50, 'the take answered: the heartbeat sent after it still waits')
  heartbeat.settle(false)
  t.equal(await beat, 'failed')
  await c.tick(500)
  t.equal(timing.unansweredFor(), 550, 'timed out, it stays unanswered')
  const next = reply()
  const later = timing.answered(next.promise)
  next.settle(true)
  await later
  t.equal(timing.unansweredFor(), 0, 'a later answer settles it: Redis answers in order')
})
