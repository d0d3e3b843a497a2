// How long a sidecar cut off from Redis spends alone: at most RATE_LIMIT_ALONE_MAX_MS after the
// send of the last script Redis ran for it (Redis ends its hold that bound + a window after its
// presence: redis-scripts.ts), whenever it noticed the cut and however late its timers fired;
// then nothing budgeted until Redis answers. (The scripted Redis: fleet-double.ts.)
import t from 'tap'
import { cutOffUntilAlone, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const CLOSED = new Error('Connection is closed.')
/** How long after the last presence-renewing script a sidecar alone waits, for a 1 s window. */
const AFTER_MS = TIMEOUT_MS + TIMING.presenceTtlMs + 1_000
const BOUND_MS = 5_000

t.test('cut off longer than RATE_LIMIT_ALONE_MAX_MS: nothing more is sent alone, until Redis answers', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS })
  const lastSent = await cutOffUntilAlone(f)
  for (let i = 0; i < 3; i++) t.match(await f.take(), { kind: 'ok', alone: true }, `share ${i + 1} of floor(6 / 2)`)
  await f.c.tick(lastSent + BOUND_MS - 1 - f.c.clock.now())
  t.match(await f.take(), { kind: 'ok' }, 'within the bound: the share, a window later')
  t.notOk(f.store.status().aloneEnded)
  await f.c.tick(1)
  t.same(await f.take(), { kind: 'degraded', ms: TIMING.heartbeatMs, aloneEnded: true }, 'the bound reached: refused')
  t.match(await f.store.budget(f.rule.id, f.rule.limits), [{ left: 0 }], 'and so say the RateLimit fields')
  t.ok(f.store.status().aloneEnded, '/status and /readyz say so')
  await f.c.tick(10 * BOUND_MS)
  t.match(await f.take(), { kind: 'degraded', aloneEnded: true }, 'however long it stays cut off')

  f.double.script.down = undefined
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.equal(f.store.status().state, 'shared', 'Redis answered the PING, was told the ledger')
  t.notOk(f.store.status().aloneEnded)
  t.match(await f.take(), { kind: 'ok' }, 'shared again')
})

t.test('timers starved: the bound counts from the send of the last script Redis ran, not from when the cut was noticed', async (t) => {
  for (const starved of [false, true]) {
    await t.test(starved ? 'the event loop blocked past the bound: the cut noticed late, nothing spent alone' : 'control: the cut noticed at once, the share spent', async (t) => {
      const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: 3_000 })
      await f.c.tick(5_050)
      await f.c.tick(0)
      const lastSent = f.c.clock.now() - 50
      f.double.script.down = CLOSED
      if (starved) {
        // No timer fires for 2.9 s: the heartbeat that finds Redis gone runs only then.
        const unblock = f.c.block(2_900)
        unblock()
        await f.c.tick(0)
      } else {
        f.double.emit(false, CLOSED)
      }
      t.equal(f.store.status().state, 'degraded')
      const noticed = f.c.clock.now()
      await f.c.tick(noticed + AFTER_MS - f.c.clock.now())
      const take = await f.take()
      if (starved) {
        t.match(take, { kind: 'degraded', aloneEnded: true }, `a window after the cut was noticed, ${f.c.clock.now() - lastSent} ms after the last script was sent`)
      } else {
        t.match(take, { kind: 'ok', alone: true })
      }
    })
  }
})
