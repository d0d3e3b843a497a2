// Attack: the fleet size a sidecar learned is overwritten by what an emptied Redis says, and
// a learned size of 1 spends the whole budget at once while degraded (no wait, no gate).
// Two sidecars, no RATE_LIMIT_FLEET_SIZE, both seen in Redis (size 2). B spends the whole
// budget through Redis. B is partitioned; Redis restarts empty; A reconnects first and finds
// itself alone (present 1): its size becomes 1, although the fleet of 2 was seen a moment ago.
// Redis goes away again: A, "a fleet of one", spends the whole budget on its own ledger,
// inside the window B already filled. Assumptions hold: the fleet was seen in Redis,
// clocks tick alike, only Redis lost its memory (A and B keep their ledgers).
// Now: without RATE_LIMIT_FLEET_SIZE a sidecar cut off spends nothing, whatever Redis said.
import t from 'tap'
import { startRedis } from '../../helpers/redis.js'
import { member, ruleOf, sendMany, until } from './fleet-member.js'

t.test('a learned fleet size survives Redis losing its data: no sidecar spends the whole budget alone', async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 4/1h')
  const a = await member(t, redis.url, rule, 0)
  const b = await member(t, redis.url, rule, 0)
  await a.clock.tick(1_000) // A's heartbeat: it learns the fleet of two
  await until(() => a.store.status().size === 2, 'A to see the fleet of two')

  const byB = await sendMany(b, 4)
  t.equal(byB, 4, 'B spends the budget through Redis (both present: room 4)')

  b.cut(true)
  await redis.stop()
  await redis.start()
  await until(() => a.store.status().state !== 'degraded' && a.store.status().state !== 'connecting', 'A to reconnect')

  await redis.stop()
  await until(() => a.store.status().state === 'degraded', 'A to fall back')
  const byA = await sendMany(a, 4)
  t.ok(byB + byA <= 4, `the fleet sent ${byB + byA} in one window of 4/1h (B ${byB} through Redis, A ${byA} alone)`)
})
