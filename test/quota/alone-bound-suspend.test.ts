// The bound on spending alone is reached by whichever clock says so first. A suspended VM's
// monotonic clock stands still while Redis's time runs on: Redis ends the sidecar's hold the
// bound + a window after its presence in real time, so after the resume, still cut off, it must
// not spend alone (found by an outside review: it did). The control ticks the same real time.
import t from 'tap'
import { cutOffUntilAlone, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const BOUND_MS = 5_000
const W_MS = 1_000

for (const [name, suspended] of [['suspended past the bound (monotonic stands still, real time runs on)', true], ['control: the same real time, not suspended', false]] as const) {
  t.test(name, async (t) => {
    const f = await scriptedFleet(t, 'GET /a 6/1s', { aloneMaxMs: BOUND_MS })
    const lastSent = await cutOffUntilAlone(f)
    const wallAtLastSent = f.c.clock.wallNow() - (f.c.clock.now() - lastSent)
    t.match(await f.take(), { kind: 'ok', alone: true }, 'alone: the share')
    // Real time since the last script Redis ran: past lastSent + TTL + timeout + BOUND + W, when
    // Redis's time has ended this sidecar's hold (its lapse score is at most lastSent + timeout + TTL).
    const past = TIMEOUT_MS + TIMING.presenceTtlMs + BOUND_MS + W_MS + 1_000
    const more = lastSent + past - f.c.clock.now()
    if (suspended) f.c.suspend(more); else await f.c.tick(more)
    const realElapsed = f.c.clock.wallNow() - wallAtLastSent
    const take = await f.take()
    t.ok(realElapsed >= past, `${realElapsed} ms of real time since the last script Redis ran`)
    t.match(take, { kind: 'degraded', aloneEnded: true }, `nothing alone once Redis has ended the hold (got ${JSON.stringify(take)})`)
  })
}
