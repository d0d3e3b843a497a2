// Attack: a cool-down started by one sidecar reached another only when that one took in the
// same scope through Redis. A gets TI's 429 (Retry-After 30 s) on a request matching no rule:
// every unmatched request cools down, fleet-wide, in Redis. B has had no such request since;
// Redis stops answering B; B's next unmatched request went to TI inside TI's Retry-After.
// Now every heartbeat reads the fleet's cool-downs: B holds it within one heartbeat.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { UPSTREAM_SCOPE } from '../../../src/quota/guard.js'
import { startRedis } from '../../helpers/redis.js'
import { adminClient, member, ruleOf } from './fleet-member.js'

t.test('a cool-down in Redis holds in every sidecar when Redis goes away, also one it had not met yet', async (t) => {
  const redis = await startRedis(t)
  const admin = adminClient(t, redis.url)
  const rule = ruleOf('GET /p 4/1h')
  const a = await member(t, redis.url, rule, 2)
  const b = await member(t, redis.url, rule, 2)

  a.store.coolDown(UPSTREAM_SCOPE, { retryAfterMs: 30_000, baseMs: 1_000, maxMs: 600_000 })
  let shared = 0
  for (let i = 0; i < 1000 && shared <= 0; i++) {
    const keys = await admin.keys(`*cooldown:${UPSTREAM_SCOPE}`)
    shared = keys[0] === undefined ? 0 : await admin.pttl(keys[0])
    if (shared <= 0) await sleep(10)
  }
  t.ok(shared > 0, 'the fleet\'s cool-down is in Redis')

  await b.clock.tick(1_000)
  for (let i = 0; i < 200 && b.store.cooldowns.left(UPSTREAM_SCOPE) === 0; i++) await sleep(10)
  b.cut(true)
  const take = await b.store.take(UPSTREAM_SCOPE, [])
  t.equal(take.kind, 'cooldown', 'B does not send to TI inside TI\'s Retry-After')
})
