// Attack: sends a fleet of one admits on its ledger while its reassertion is on the way are
// never told to Redis. RATE_LIMIT_FLEET_SIZE=1, one sidecar, 2/1h. Redis drops out, one send
// on the ledger; Redis answers a PING again and the reassertion goes out with the ledger as it
// was; its answer is slow. Meanwhile a caller is admitted alone (fleet of one: whole budget,
// no wait): that send is in the ledger but not in Redis. Once shared, Redis sees one send and
// admits another: three in the window.
import t from 'tap'
import { startRedis } from '../../helpers/redis.js'
import { member, ruleOf, sendMany, until } from './fleet-member.js'

t.test('a send admitted while the reassertion is under way still counts in Redis afterwards', async (t) => {
  const redis = await startRedis(t)
  const rule = ruleOf('GET /p 2/1h')
  const a = await member(t, redis.url, rule, 1)
  t.equal(a.store.status().state, 'shared')

  a.cut(true)
  let sent = await sendMany(a, 1)
  t.equal(a.store.status().state, 'degraded')

  a.cut(false)
  const slow = a.holdReassert()
  await a.clock.tick(1_000) // the PING answers: the reassertion goes out
  await slow.held
  sent += await sendMany(a, 1) // while its answer is on the way
  slow.release()
  await until(() => a.store.status().state === 'shared', 'A to share again')
  sent += await sendMany(a, 2)
  t.ok(sent <= 2, `one sidecar sent ${sent} in one window of 2/1h`)
})
