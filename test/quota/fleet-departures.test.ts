// A send the fleet admitted is renewed in Redis every half of its shortest window while it
// waits to leave, so Redis never drops it while this sidecar's ledger still counts it; the
// renewals end when it leaves or is given back, with the ledger's hold, or at close; none
// for windows the hold outlasts. A fake clock and a Redis double that records the calls (the
// LEAVING script itself: redis-scripts.test.ts; two sidecars on a real Redis: late-fleet.test.ts).
import t, { type Test } from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { createDepartures, RETIME_AFTER_MS } from '../../src/quota/fleet-departures.js'
import { createFleetView } from '../../src/quota/fleet-view.js'
import { createLedger, PENDING_HOLD_MS } from '../../src/quota/ledger.js'
import type { RedisStore } from '../../src/quota/redis-backend.js'
import type { Take } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'

function setup (t: Test, rules: string) {
  const c = fakeClock()
  const calls: string[] = []
  const redis = {
    async leaving (_scope: string, _limits: unknown, ...ids: string[]) { calls.push(`leaving ${ids.join(',')}`) },
    async refund (_scope: string, _limits: unknown, id: string) { calls.push(`refund ${id}`) }
  } as unknown as RedisStore
  const view = createFleetView(2, 0)
  view.state = 'shared'
  const ledger = createLedger(c.clock)
  const departures = createDepartures({ clock: c.clock, ledger, redis, view })
  t.teardown(() => { departures.close() })
  const rule = parseRules(rules, 'RATE_LIMITS').rules[0]
  if (rule === undefined) throw new Error('a rule')
  let n = 0
  /** The take's reply comes this many ms after it was asked (0: at once). */
  let replyMs = 0
  const take = departures.renewing((scope, limits): Take | Promise<Take> => {
    const id = `s${++n}`
    const admitted = (): Take => {
      ledger.record(scope, limits, id)
      return { kind: 'ok', id }
    }
    return replyMs === 0 ? admitted() : c.tick(replyMs).then(admitted)
  })
  const admit = (): string => {
    const taken = take(rule.id, rule.limits) as Take
    if (taken.kind !== 'ok') throw new Error('admitted')
    return taken.id
  }
  return { c, calls, view, departures, rule, admit, take, slowReplies: (ms: number) => { replyMs = ms } }
}

t.test('renewed every half of the shortest window while it waits; once more when it leaves late; then never', async (t) => {
  const { c, calls, departures, rule, admit } = setup(t, 'GET /a 2/1s 10/1m')
  const id = admit()
  await c.tick(499)
  t.same(calls, [], 'nothing within half a second')
  await c.tick(1)
  t.same(calls, [`leaving ${id}`], 'renewed at half of 1 s')
  await c.tick(1_000)
  t.same(calls.length, 3, 'and every 500 ms')
  t.equal(departures.waiting(), 1)
  departures.leaving(rule.id, rule.limits, id)
  t.same(calls.length, 4, 'it left 1.5 s late: re-timed once more')
  await c.tick(5_000)
  t.same(calls.length, 4, 'then never again')
  t.equal(departures.waiting(), 0)
})

t.test('a send that leaves at once costs no Redis call; one given back is refunded, not renewed', async (t) => {
  const { c, calls, departures, rule, admit } = setup(t, 'GET /a 2/1s')
  const quick = admit()
  await c.tick(RETIME_AFTER_MS - 1)
  departures.leaving(rule.id, rule.limits, quick)
  const back = admit()
  departures.refund(rule.id, rule.limits, back)
  await c.tick(5_000)
  t.same(calls, [`refund ${back}`])
})

t.test('renewals end with the ledger\'s hold, at close, and while not shared; none where the hold outlasts the window', async (t) => {
  const held = setup(t, 'GET /a 2/1s')
  held.admit()
  await held.c.tick(PENDING_HOLD_MS + 5_000)
  t.equal(held.calls.length, PENDING_HOLD_MS / 500 - 1, 'renewed until the hold ends (the ledger then counts it from its end)')
  t.equal(held.departures.waiting(), 0)

  const closed = setup(t, 'GET /a 2/1s')
  closed.admit()
  closed.departures.close()
  closed.admit()
  await closed.c.tick(5_000)
  t.same(closed.calls, [], 'closed: no renewal, of a send admitted before or after (a take in flight)')

  const degraded = setup(t, 'GET /a 2/1s')
  degraded.admit()
  degraded.view.state = 'degraded'
  await degraded.c.tick(1_000)
  t.same(degraded.calls, [], 'cut off: Redis is not asked (the reassertion tells it the ledger)')
  t.equal(degraded.departures.waiting(), 1, 'still renewed once Redis answers again')
  degraded.view.state = 'shared'
  await degraded.c.tick(500)
  t.equal(degraded.calls.length, 1)

  const long = setup(t, 'GET /catalog 1/4h')
  long.admit()
  t.equal(long.departures.waiting(), 0, 'a 4 h window: the hold ends long before Redis would drop it')
})

t.test('one script renews every send of a rule waiting, at the pace of the first; the first half window counts from the take\'s ask', async (t) => {
  const { c, calls, departures, rule, admit } = setup(t, 'GET /a 100/1s')
  const ids = [admit()]
  await c.tick(200)
  ids.push(admit(), admit())
  await c.tick(300)
  t.same(calls, [`leaving ${ids.join(',')}`], 'all three in one call, at half a window after the first')
  departures.leaving(rule.id, rule.limits, ids[0] as string)
  await c.tick(500)
  t.same(calls.slice(2), [`leaving ${ids.slice(1).join(',')}`], 'the one that left (re-timed on its own) is no longer renewed')

  const slow = setup(t, 'GET /a 2/1s')
  slow.slowReplies(300)
  const taken = await slow.take(slow.rule.id, slow.rule.limits)
  t.same(slow.calls, [], 'the reply came 300 ms after the ask')
  await slow.c.tick(199)
  t.same(slow.calls, [])
  await slow.c.tick(1)
  t.same(slow.calls, [`leaving ${taken.kind === 'ok' ? taken.id : ''}`], 'renewed half a window after the ask, not after the reply')
})
