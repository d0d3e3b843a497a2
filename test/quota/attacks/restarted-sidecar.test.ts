// Attack: a sidecar restarted while cut off from Redis spends its share at once ("Redis never
// counted this sidecar present"), but its previous run was present and spent through Redis in
// the open window. RATE_LIMIT_FLEET_SIZE=3, 6/1h: A, B, C present spend 2 each (6, the whole
// budget, all in Redis, which keeps its data). A restarts; the new A cannot reach Redis (a
// network partition). It spends floor(6/3) = 2 at once: 8 in the window. At most 3 sidecars
// at once, clocks alike, Redis lost nothing: every assumption holds. The same with
// RATE_LIMIT_FLEET_SIZE=1: "a fleet of one keeps its whole budget" at once, with no wait.
import t from 'tap'
import { startRedis } from '../../helpers/redis.js'
import { fleetOf, member, ruleOf, sendMany } from './fleet-member.js'

t.test('a sidecar restarted while cut off from Redis does not spend before its previous run\'s sends left the window', async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 6/1h')
  const fleet = await fleetOf(t, redis.url, rule, 3, 3)
  let sent = 0
  for (const m of fleet) sent += await sendMany(m, 2)
  t.equal(sent, 6, 'all three present: the whole budget through Redis')

  await fleet[0]?.store.close() // A restarts (a crash, an OOM kill, a rollout of its pod)
  const again = await member(t, redis.url, rule, 3, { cut: true })
  t.equal(again.store.status().state, 'connecting', 'the new A never reached Redis')
  sent += await sendMany(again, 2)
  t.ok(sent <= 6, `the fleet sent ${sent} in one window of 6/1h`)
})

t.test('a fleet of one restarted while cut off from Redis does not spend the budget its previous run spent', async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 2/1h')
  const [a] = await fleetOf(t, redis.url, rule, 1, 1)
  let sent = a === undefined ? 0 : await sendMany(a, 2)
  t.equal(sent, 2, 'the whole budget through Redis')

  await a?.store.close()
  const again = await member(t, redis.url, rule, 1, { cut: true })
  sent += await sendMany(again, 2)
  t.ok(sent <= 2, `one sidecar, restarted, sent ${sent} in one window of 2/1h`)
})
