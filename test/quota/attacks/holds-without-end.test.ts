// Known open (an outside review of the held sizes): a lapsed entry is never released by time,
// so a pod that died without leaving is held against the fleet until enough sidecars run that
// the count releases it, which after a size-lowering rollout may be never. Sound (a lapsed
// sidecar may be alive and cut off, spending alone for as long as it is), but an outage of part
// of a budget with no end; the way out is a bound on how long a cut-off sidecar spends alone,
// after which every hold can end (docs/quota-guard.md). Each is a todo until then.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { limit, fleet, lapse, W } from './rollout-fleet.js'

t.setTimeout(120_000)
const TODO = { todo: 'known open: holds without end (docs/quota-guard.md)' }

t.test('a rollout 4 → 3 in which a pod of each size died: the whole budget once every hold has ended', async (t) => {
  const f = await fleet(t)
  const b = f.member('b', 3)
  const c = f.member('c', 3)
  await f.join(b, c)
  await lapse(f, f.member('x', 4))
  await lapse(f, f.member('y', 3))
  const d = f.member('d', 3)
  await f.join(d)
  const until = Date.now() + 10 * W + 3_000
  while (Date.now() < until) { await f.beat(b, c, d); await sleep(100) }
  t.comment(`lapsed ${JSON.stringify(await f.lapsed())}`)
  const N = 12
  t.equal(await f.admitted(b, [limit(N, W)], N), N, 'three present, all declaring 3, nothing sent', TODO)
})

t.test('a crash loop: restarts that lapsed for 80 ms each hold no share', async (t) => {
  const f = await fleet(t)
  const b = f.member('b', 3)
  const c = f.member('c', 3)
  await f.join(b, c)
  const y = f.member('y', 3)
  for (let i = 0; i < 4; i++) {
    await lapse(f, y)
    await f.beat(b)
  }
  y.presenceTtlMs = 1_000
  await f.join(y)
  await f.beat(b, c, y)
  // Past the releases' start (TTL + timeout); the window is far longer than any lapse.
  await sleep(2_500)
  const N = 6
  t.equal(await f.admitted(b, [limit(N, 60_000)], N), N, 'no lapse lasted a window: nothing to hold', TODO)
})
