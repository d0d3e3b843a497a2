// The RateLimit fields within a young tally's grace (an epoch younger than freshGraceMs: the
// sidecars coming back may not have told it their sends yet). Takes are refused until the
// grace's last moment and go from it on (fleet-store.ts, take); the fields say the same: none
// left, reset at the grace's end, then the fleet's tally as read from Redis.
import t from 'tap'
import { scriptedFleet } from './fleet-double.js'

const GRACE_MS = 3_000
const TALLY = [{ left: 2, resetMs: 6_000 }]

t.test('within the grace none are left, reset at its end; from its last moment, the tally\'s, as a take goes', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 3/6s', {
    timing: { freshGraceMs: GRACE_MS },
    before: (s) => { s.reassert = () => ({ epochAgeMs: 1_000 }); s.peek = () => TALLY }
  })
  const fields = async () => await f.store.budget(f.rule.id, f.rule.limits)
  t.same(await fields(), [{ left: 0, resetMs: 2_000 }], 'an epoch made 1 s ago: 2 s of the grace left')
  await f.c.tick(1_999)
  t.same(await fields(), [{ left: 0, resetMs: 1 }])
  t.match(await f.take(), { kind: 'degraded', ms: 1 }, 'a take 1 ms before the end: refused')
  await f.c.tick(1)
  t.same(await fields(), TALLY, 'the grace over: the tally\'s')
  t.match(await f.take(), { kind: 'ok' }, 'a take at the same moment goes')
})
