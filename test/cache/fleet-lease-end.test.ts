// What a fetch's claim leaves behind (src/cache/fleet-fetch.ts): once its fetch ends, or the
// cache closes, no timer of its own runs on; after close nothing more goes to Redis (the claims
// lapse); a claim given back because its caller left, and failing to be, is reported.
import t from 'tap'
import { LEASE_MS } from '../../src/cache/fleet-fetch.js'
import { cacheKeyOf, scriptedFleet, settled } from './fleet-scripted.js'

const ended = { entry: undefined, standsIn: false }

t.test('a fetch that ended leaves no timer behind', async (t) => {
  const s = scriptedFleet({})
  t.same(await s.fleet.turn(cacheKeyOf('k'), {}, undefined, s.caller), { kind: 'fetch' })
  t.equal(s.clock.fake.countTimers(), 1, 'its lease is renewed while it runs')
  s.fleet.ended('k', ended)
  t.equal(s.clock.fake.countTimers(), 0)
  t.same(s.calls, ['claim k', 'release k'])
})

t.test('closing stops every claim\'s renewal at once, and a fetch that ends afterwards sends nothing: the claims lapse', async (t) => {
  const s = scriptedFleet({})
  await s.fleet.turn(cacheKeyOf('k'), {}, undefined, s.caller)
  await s.fleet.turn(cacheKeyOf('j'), {}, undefined, s.caller)
  t.equal(s.clock.fake.countTimers(), 2)
  s.fleet.close()
  t.equal(s.clock.fake.countTimers(), 0, 'no timer left')
  s.fleet.ended('k', ended)
  await s.clock.tick(LEASE_MS)
  await settled()
  t.same(s.calls, ['claim k', 'claim j'], 'no renewal, no release')
})

t.test('a caller gone by the time its claim came back: the claim is given back, and a failure to is reported, never thrown', async (t) => {
  const s = scriptedFleet({ release: async () => { throw new Error('connection lost') } })
  s.caller.destroyed = true
  t.same(await s.fleet.turn(cacheKeyOf('k'), {}, undefined, s.caller), { kind: 'gone' })
  await settled()
  t.same(s.calls, ['claim k', 'release k'])
  t.same(s.errors, ['a fetch claim\'s release'])
  t.equal(s.clock.fake.countTimers(), 0, 'nothing held')
})
