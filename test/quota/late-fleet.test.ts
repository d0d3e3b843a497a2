// Two sidecars on one Redis, 2/1s: sidecar A's two sends wait 1.5 s to leave (a full pool, up to
// UPSTREAM_QUEUE_TIMEOUT_MS). Redis would drop them a window after their take and let B spend
// their places, all four reaching TI within 500 ms (found by an outside review); renewed every
// half window while they wait, they keep their places. Control: A's sends leave at once.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { startRedis } from '../helpers/redis.js'
import { cuttable, realTimeMember, spendUntil } from './real-time-member.js'

const rule = parseRules('GET /x 2/1s', 'RATE_LIMITS').rules[0]
if (rule === undefined) throw new Error('a rule')

const memberOn = async (t: Test, url: string): Promise<ReturnType<typeof realTimeMember>> =>
  await realTimeMember(t, url, 'late-fleet:', rule as NonNullable<typeof rule>)

const mostIn = (arrivals: readonly number[], ms: number): number =>
  Math.max(0, ...arrivals.map((a) => arrivals.filter((b) => b >= a && b < a + ms).length))

async function scenario (t: Test, waitMs: number, { cutA = false } = {}): Promise<number> {
  if (rule === undefined) throw new Error('a rule')
  const server = await startRedis(t)
  const admin = new Redis(server.url)
  t.teardown(() => { admin.disconnect() })
  let cutA_: () => void = () => {}
  const a = await realTimeMember(t, server.url, 'late-fleet:', rule, (redis) => {
    const c = cuttable(redis)
    cutA_ = c.cut
    return c.redis
  })
  const b = await memberOn(t, server.url)
  const arrivals: number[] = []
  const aTakes = [await a.take(rule.id, rule.limits), await a.take(rule.id, rule.limits)]
  if (cutA) cutA_()
  const aLeft = sleep(waitMs).then(() => {
    for (const tk of aTakes) {
      if (tk.kind !== 'ok') continue
      // Refused as it leaves: given back, nothing sent.
      if (a.leaving(rule.id, rule.limits, tk.id) !== undefined) a.refund(rule.id, rule.limits, tk.id)
      else arrivals.push(performance.now())
    }
  })
  if (waitMs === 0) await aLeft
  // B: a caller every 20 ms for 2 s, each sent as soon as admitted.
  await spendUntil(b, rule, performance.now() + 2_000, arrivals)
  await aLeft
  const first = Math.min(...arrivals)
  t.comment(`arrivals (ms) ${arrivals.sort((x, y) => x - y).map((x) => Math.round(x - first)).join(',')}`)
  return mostIn(arrivals, 900)
}

t.test('A waits 1.5 s for a connection: most in 900 ms', async (t) => {
  const most = await scenario(t, 1_500)
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})

t.test('A waits 1.5 s and is cut off from Redis meanwhile: its sends are refused as they leave', async (t) => {
  const most = await scenario(t, 1_500, { cutA: true })
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})

t.test('control: A leaves at once', async (t) => {
  const most = await scenario(t, 0)
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})
