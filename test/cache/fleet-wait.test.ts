// How a request waiting for another sidecar's fetch ends (src/cache/fleet-fetch.ts): at fillMs
// at the latest, looking no more once its caller left, and with what the claimant left it, also
// when the value stored is one it cannot use.
import t from 'tap'
import { FLEET_POLL_MS, type FleetClaims, type Turn } from '../../src/cache/fleet-fetch.js'
import type { Failure } from '../../src/cache/flights.js'
import { FILL_MS, cacheKeyOf, scriptedFleet, settled } from './fleet-scripted.js'

type Look = Awaited<ReturnType<FleetClaims['look']>>
const key = cacheKeyOf('k')
const held = async () => ({ kind: 'held' as const })

t.test('a caller that leaves while a look is on its way: nothing more is looked at, whatever that look brings', async (t) => {
  let bring: (look: Look) => void = () => {}
  const s = scriptedFleet({ claim: held, look: () => new Promise((resolve) => { bring = resolve }) })
  const turn = s.fleet.turn(key, {}, undefined, s.caller)
  await s.clock.tick(FLEET_POLL_MS)
  t.same(s.calls, ['claim k', 'look k'], 'the first look is on its way')
  s.caller.emit('close')
  t.same(await turn, { kind: 'gone' })
  bring({ stored: false, held: 'live' })
  await s.clock.tick(FILL_MS)
  t.same(s.calls, ['claim k', 'look k'], 'no look after it left')
  t.equal(s.clock.fake.countTimers(), 0, 'no timer left behind')
})

t.test('claims that lapse just as fillMs runs out: the waiter fetches at fillMs, it does not claim again', async (t) => {
  const s = scriptedFleet({ claim: held, look: async () => ({ stored: false, held: 'none' }) })
  let outcome: Turn | undefined
  void s.fleet.turn(key, {}, undefined, s.caller).then((turn) => { outcome = turn })
  await s.clock.tick(FILL_MS)
  await settled()
  t.same(outcome, { kind: 'fetch' }, 'answered at fillMs')
  t.equal(s.calls.filter((c) => c === 'claim k').length, FILL_MS / FLEET_POLL_MS, 'a claim each time the last lapsed, none at fillMs')
  t.equal(s.clock.fake.countTimers(), 0)
})

t.test('a request that cannot use the value stored gets what the claimant left: its failure, or nothing once its caller left', async (t) => {
  const failure: Failure = { answer: { statusCode: 503, headers: {}, body: Buffer.from('down') } }
  const a = scriptedFleet({ claim: held, look: async () => ({ stored: false, held: failure }) })
  const failed = a.fleet.turn(key, {}, undefined, a.caller, true)
  await a.clock.tick(FLEET_POLL_MS)
  t.same(await failed, { kind: 'failure', failure }, 'the claimant\'s failure, not a fetch of its own')

  const b = scriptedFleet({ claim: held, look: async () => ({ stored: false, held: 'live' }) })
  const gone = b.fleet.turn(key, {}, undefined, b.caller, true)
  await b.clock.tick(FLEET_POLL_MS)
  b.caller.emit('close')
  t.same(await gone, { kind: 'gone' }, 'its caller left: it does not fetch')
})
