// Attack: a sidecar that has seen only itself in Redis takes a learned fleet size of 1 as
// "a fleet of one keeps its whole budget", with no wait, while degraded. No
// RATE_LIMIT_FLEET_SIZE; A starts alone (size 1). B joins and, both present, spends the whole
// budget through Redis before A's next heartbeat. Redis then stops answering A: A spends the
// whole budget again on its own ledger. Redis lost nothing; the fleet of two was seen in Redis.
import t from 'tap'
import { startRedis } from '../../helpers/redis.js'
import { member, ruleOf, sendMany } from './fleet-member.js'

t.test('a sidecar that saw only itself does not spend the whole budget alone once another joined', async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 4/1h')
  const a = await member(t, redis.url, rule, 0)
  t.equal(a.store.status().size, 1, 'A alone in Redis: fleet size 1')
  const b = await member(t, redis.url, rule, 0)
  t.equal(b.store.status().size, 2, 'B joins: Redis knows a fleet of two')

  const byB = await sendMany(b, 4)
  a.cut(true) // before A's next heartbeat: a stall, a partition
  const byA = await sendMany(a, 4)
  t.ok(byA + byB <= 4, `the fleet sent ${byA + byB} in one window of 4/1h (B ${byB} through Redis, A ${byA} alone)`)
})
