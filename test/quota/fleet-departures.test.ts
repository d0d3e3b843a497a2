// A send the fleet admitted is renewed in Redis every half of its shortest window while it
// waits to leave, so Redis never drops it while this sidecar's ledger still counts it; the
// renewals end when it leaves or is given back, with the ledger's hold, or at close; none
// for windows the hold outlasts. A fake clock and a Redis double that records the calls (the
// LEAVING script itself: redis-scripts.test.ts; two sidecars on a real Redis: late-fleet.test.ts).
import t, { type Test } from 'tap'
import { parseRules, type Limit } from '../../src/config/rate-limit-rules.js'
import { createDepartures, RETIME_AFTER_MS } from '../../src/quota/fleet-departures.js'
import { createFleetView } from '../../src/quota/fleet-view.js'
import { createLedger, PENDING_HOLD_MS } from '../../src/quota/ledger.js'
import type { RedisStore } from '../../src/quota/redis-backend.js'
import type { Take } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'

function setup (t: Test, rules: string) {
  const c = fakeClock()
  const calls: string[] = []
  /** Redis answers nothing: renewals fail (the view is changed apart, as the conversation would). */
  let cut = false
  /** When the oldest command Redis has not answered was sent: none, unless told. */
  let unansweredSince: number | undefined
  const redis = {
    unansweredFor: () => unansweredSince === undefined ? 0 : c.clock.now() - unansweredSince,
    async leaving (_scope: string, _limits: unknown, ...ids: string[]) {
      calls.push(`leaving ${ids.join(',')}`)
      if (cut) throw new Error('cut off')
    },
    async refund (_scope: string, _limits: unknown, id: string) { calls.push(`refund ${id}`) }
  } as unknown as RedisStore
  const view = createFleetView(2, 0)
  view.state = 'shared'
  const ledger = createLedger(c.clock)
  /** Cut off for longer than the alone bound: off unless told. */
  let pastBound = false
  const departures = createDepartures({ clock: c.clock, ledger, redis, view, retryMs: 1_000, quietMs: 200, aloneEnded: () => pastBound })
  t.teardown(() => { departures.close() })
  const rule = parseRules(rules, 'RATE_LIMITS').rules[0]
  if (rule === undefined) throw new Error('a rule')
  let n = 0
  /** The take's reply comes this many ms after it was asked (0: at once). */
  let replyMs = 0
  /** The next take is decided alone (as fleet-alone.ts does: no placedBy). */
  let alone = false
  const take = departures.renewing((scope, limits): Take | Promise<Take> => {
    const id = `s${++n}`
    const askedAt = c.clock.now()
    if (alone) {
      ledger.record(scope, limits, id)
      return { kind: 'ok', id, alone: true }
    }
    const admitted = (): Take => {
      // As the fleet store does for a take Redis decided.
      departures.placedBy(id, askedAt)
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
  const admitAlone = (): string => {
    alone = true
    try {
      return admit()
    } finally {
      alone = false
    }
  }
  const controls = { slowReplies: (ms: number) => { replyMs = ms }, cutOff: () => { cut = true }, unanswered: (since: number | undefined) => { unansweredSince = since }, pastBound: () => { pastBound = true } }
  return { c, calls, view, ledger, departures, rule, admit, admitAlone, take, ...controls }
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

t.test('cut off from Redis, a send Redis admitted that waited is refused as it leaves, unsent; one that did not wait goes', async (t) => {
  const { c, view, ledger, departures, rule, admit, cutOff } = setup(t, 'GET /a 2/1s')
  const waited = admit()
  const quick = admit()
  cutOff()
  await c.tick(400)
  view.state = 'degraded'
  await c.tick(RETIME_AFTER_MS - 1)
  t.same(departures.leaving(rule.id, rule.limits, waited), { reason: 'degraded', ms: 1_000 }, 'refused: the fleet counts it from its take, 449 ms before TI would')
  t.equal(ledger.used(rule.id, rule.limits[0] as Limit), 2, 'still counted until it is given back')
  departures.refund(rule.id, rule.limits, waited)
  t.equal(ledger.used(rule.id, rule.limits[0] as Limit), 1, 'given back')
  t.equal(departures.waiting(), 1)
  const fresh = admit()
  t.equal(departures.leaving(rule.id, rule.limits, fresh), undefined, 'placed just now: it goes')
  t.same(departures.leaving(rule.id, rule.limits, quick), { reason: 'degraded', ms: 1_000 }, 'the other, as late, refused too')
})

t.test('shared, a late send goes (Redis re-times it); cut off, one Redis renewed within the margin goes, and one decided alone always goes', async (t) => {
  const { c, view, departures, rule, admit, cutOff, ledger } = setup(t, 'GET /a 2/1s')
  const late = admit()
  await c.tick(300)
  t.equal(departures.leaving(rule.id, rule.limits, late), undefined, 'shared: it goes, re-timed')
  const renewed = admit()
  await c.tick(500)
  // The renewal at 500 ms was answered: Redis placed it again then.
  cutOff()
  view.state = 'degraded'
  await c.tick(RETIME_AFTER_MS - 1)
  t.equal(departures.leaving(rule.id, rule.limits, renewed), undefined, 'renewed 49 ms ago: it goes')
  const next = admit()
  await c.tick(500)
  t.same(departures.leaving(rule.id, rule.limits, next), { reason: 'degraded', ms: 1_000 }, 'its renewal failed: refused')
  // A send decided alone (no placedBy): its ledger is its account; it goes however late.
  ledger.record(rule.id, rule.limits, 'alone-1')
  await c.tick(700)
  t.equal(departures.leaving(rule.id, rule.limits, 'alone-1'), undefined, 'decided alone: it goes')
})

t.test('shared but a command unanswered past its timeout (Redis frozen, not yet noticed): a late send is refused; within it, or answered, it goes', async (t) => {
  const { c, departures, rule, admit, unanswered } = setup(t, 'GET /a 10/1h')
  const a = admit()
  const b = admit()
  const d = admit()
  await c.tick(300)
  unanswered(c.clock.now())
  await c.tick(200)
  t.equal(departures.leaving(rule.id, rule.limits, a), undefined, 'a heartbeat unanswered for 200 ms: it goes')
  await c.tick(1)
  t.same(departures.leaving(rule.id, rule.limits, b), { reason: 'degraded', ms: 1_000 }, 'for 201 ms: refused')
  // An event loop that stalled sent nothing meanwhile: the last command was answered.
  unanswered(undefined)
  await c.tick(5_000)
  t.equal(departures.leaving(rule.id, rule.limits, d), undefined, 'every command answered, however long ago: it goes')
})

t.test('held past the ledger\'s hold, a send is refused as it leaves whatever Redis does', async (t) => {
  const { c, departures, rule, admit } = setup(t, 'GET /a 2/1s')
  const id = admit()
  await c.tick(PENDING_HOLD_MS)
  t.same(departures.leaving(rule.id, rule.limits, id), { reason: 'budget', ms: 1_000 })
  // A request of no rule has an id through Redis, and no limit to hold it: it goes.
  t.equal(departures.leaving('upstream', [], 'free-1'), undefined)
})

t.test('decided alone, a send is refused as it leaves once the alone bound has passed, however it waited; one Redis admitted is not', async (t) => {
  const { c, view, ledger, departures, rule, admit, admitAlone, cutOff, pastBound } = setup(t, 'GET /a 5/1s')
  const placed = admit()
  cutOff()
  view.state = 'degraded'
  const early = admitAlone()
  const late = admitAlone()
  await c.tick(10)
  t.equal(departures.leaving(rule.id, rule.limits, early), undefined, 'before the bound: it goes')
  pastBound()
  t.same(departures.leaving(rule.id, rule.limits, late), { reason: 'degraded', ms: 1_000, aloneEnded: true }, 'past the bound: refused, unsent')
  departures.refund(rule.id, rule.limits, late)
  t.equal(ledger.used(rule.id, rule.limits[0] as Limit), 2, 'given back: the one that left and the one Redis admitted remain')
  t.equal(departures.leaving(rule.id, rule.limits, placed), undefined, 'admitted by Redis, leaving within the margin: the bound is not its concern')
})

t.test('decided alone, then told Redis by a reassertion: placed from it, and still refused past the alone bound', async (t) => {
  const { c, view, departures, rule, admitAlone, cutOff, pastBound, unanswered } = setup(t, 'GET /a 5/1s')
  const limit = rule.limits[0] as Limit
  cutOff()
  view.state = 'degraded'
  const [first, second] = [admitAlone(), admitAlone()]
  view.state = 'shared'
  departures.reasserted([first, second].map((id) => ({ scope: rule.id, limit, id, ageMs: 0 })), c.clock.now())
  await c.tick(RETIME_AFTER_MS)
  unanswered(c.clock.now() - 300)
  t.same(departures.leaving(rule.id, rule.limits, first), { reason: 'degraded', ms: 1_000 }, 'placed by the reassertion: late while Redis is quiet, refused')
  unanswered(undefined)
  view.state = 'degraded'
  pastBound()
  t.same(departures.leaving(rule.id, rule.limits, second), { reason: 'degraded', ms: 1_000, aloneEnded: true }, 'cut off again past the bound: refused as a send decided alone')
})
