// Attack: a sidecar whose first contact is with an emptied Redis creates a new epoch without a
// gate, and after the fresh grace (3 s) spends the room its formula leaves, although sidecars
// that spent in the open window are only partitioned (they keep their ledgers but cannot tell
// Redis within 3 s). RATE_LIMIT_FLEET_SIZE=3, 4/1h: A, B, C present, A and B spend 4. C is
// replaced by D; A and B are cut off from Redis; Redis restarts empty; D starts, waits out the
// grace, and finds room 4 - 2 × floor(4/3) = 2. Six sends in the window. At most 3 sidecars at
// once, clocks alike, only Redis lost its memory.
// Open, and documented as outside the guarantee (docs/quota-guard.md, assumption 3): D cannot
// tell this from a first deployment on a fresh Redis, and gating every limit for a window on a
// fresh tally would refuse the catalog for four hours after every first start. Kept as a todo
// so that it shows in every run until a design closes it.
import t from 'tap'
import { startRedis } from '../../helpers/redis.js'
import { fleetOf, member, ruleOf, sendMany, TIMING, type Member } from './fleet-member.js'

t.test('a new sidecar on an emptied Redis does not spend what partitioned sidecars already spent', {
  todo: 'open: Redis emptied while the sidecars that spent are partitioned for longer than the 3 s grace (docs/quota-guard.md)'
}, async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 4/1h')
  const [a, b, c] = await fleetOf(t, redis.url, rule, 3, 3) as [Member, Member, Member]
  let sent = await sendMany(a, 2) + await sendMany(b, 2)
  t.equal(sent, 4, 'all three present: the whole budget through Redis')

  await c.store.close() // C is replaced (a rollout, a crash); it spent nothing
  a.cut(true)
  b.cut(true)
  await redis.stop()
  await redis.start()

  const d = await member(t, redis.url, rule, 3, { timing: { ...TIMING, freshGraceMs: 3_000 } })
  await d.clock.tick(3_000) // the fresh grace: sidecars coming back could re-assert meanwhile
  sent += await sendMany(d, 4)
  t.ok(sent <= 4, `the fleet sent ${sent} in one window of 4/1h`)
})
