// The cost of the holds that end by time (an outside review): every script that renews
// presence scanned, for each lapsed entry, every release scored after its lapse (kept 7 days):
// with 20,000 released, a heartbeat took 73–117 ms, past the 200 ms Redis timeout at its worst,
// and the whole fleet degraded. Each release is now scanned while it is recent (scored from the
// last scan on), so a heartbeat costs about the same beside 20,000 older releases as beside none.
// Measured in Redis (INFO commandstats: the scripts' own time), not on a busy test machine's clock.
import t from 'tap'
import type { Redis } from 'ioredis'
import { fleet, lapse, PREFIX, W } from './rollout-fleet.js'

t.setTimeout(120_000)
const SPAN_MS = 24 * 3_600_000 + W
const HOUR_MS = 3_600_000
const RELEASED = 20_000

/** Microseconds Redis spent per script call, over `beats` heartbeats. */
async function usPerScript (admin: Redis, beats: number, beat: () => Promise<void>): Promise<number> {
  await admin.config('RESETSTAT')
  for (let i = 0; i < beats; i++) await beat()
  const stats = await admin.info('commandstats')
  const line = stats.split('\n').find((l) => l.startsWith('cmdstat_evalsha:'))
  const perCall = Number(/usec_per_call=([\d.]+)/.exec(line ?? '')?.[1])
  if (Number.isNaN(perCall)) throw new Error('no script time in INFO commandstats')
  return perCall
}

t.test(`a heartbeat beside ${RELEASED} releases made in the hours since 5 entries lapsed`, async (t) => {
  const f = await fleet(t, SPAN_MS)
  const b = f.member('b', 2)
  const c = f.member('c', 2)
  await f.join(b, c)
  // Declaring 8: two present of 8, none of the five can be released by the count.
  for (const id of ['x1', 'x2', 'x3', 'x4', 'x5']) await lapse(f, f.member(id, 8))
  await f.beat(b, c)
  const [s] = await f.admin.time()
  const now = Number(s) * 1000
  for (const id of ['x1', 'x2', 'x3', 'x4', 'x5']) await f.admin.zadd(`${PREFIX}lapsed`, 'XX', now - 3 * HOUR_MS, id)
  const beat = async (): Promise<void> => { await f.beat(b, c) }
  const alone = await usPerScript(f.admin, 20, beat)
  // Released over the 3 hours since, up to 2 minutes ago.
  const step = Math.floor((3 * HOUR_MS - 120_000) / RELEASED)
  for (let i = 0; i < RELEASED; i += 2_000) {
    const batch: Array<string | number> = []
    for (let k = i; k < i + 2_000; k++) {
      const at = now - 3 * HOUR_MS + 1 + k * step
      batch.push(at, `r${k}@${at}~${SPAN_MS}`)
    }
    await f.admin.zadd(`${PREFIX}released`, ...batch)
  }
  const beside = await usPerScript(f.admin, 20, beat)
  t.same((await f.lapsed()).sort(), ['x1', 'x2', 'x3', 'x4', 'x5'], 'all five still held')
  t.ok(beside < 5 * alone + 2_000, `${beside.toFixed(0)} µs per heartbeat beside ${RELEASED} releases, ${alone.toFixed(0)} µs beside none`)
})
