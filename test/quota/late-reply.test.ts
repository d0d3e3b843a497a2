// A send is re-timed in Redis by how late it left after its take was asked of Redis, the wait
// for the reply included. Found by an outside review: measured from when the reply was
// processed, a reply handled 200 ms after Redis ran the take (event-loop lag, a slow command
// ahead of it, a lost packet resent) left Redis counting the send from 200 ms before it left,
// and a second sidecar was admitted 800 ms after the send reached TI under 1/1s. The control
// spends the same 200 ms after the reply. Times are read from Redis (TIME), so the bounds hold
// however busy the machine is.
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { startRedis } from '../helpers/redis.js'
import { realTimeMember } from './real-time-member.js'

const rule = parseRules('GET /x 1/1s', 'RATE_LIMITS').rules[0]
if (rule === undefined) throw new Error('a rule')
const PREFIX = 'late-reply:'

const memberOn = async (t: Test, url: string, replyLagMs: number): Promise<ReturnType<typeof realTimeMember>> =>
  await realTimeMember(t, url, PREFIX, rule as NonNullable<typeof rule>, (real) => ({
    ...real,
    async take (...args) {
      const r = await real.take(...args)
      await sleep(replyLagMs)
      return r
    }
  }))

async function redisNow (admin: Redis): Promise<number> {
  const [s, us] = await admin.time()
  return Number(s) * 1000 + Math.floor(Number(us) / 1000)
}

async function scenario (t: Test, replyLagMs: number, lagAfterReplyMs: number): Promise<number> {
  const server = await startRedis(t)
  const admin = new Redis(server.url)
  t.teardown(() => { admin.disconnect() })
  const a = await memberOn(t, server.url, replyLagMs)
  const b = await memberOn(t, server.url, 0)
  if (rule === undefined) throw new Error('a rule')
  const taken = await a.take(rule.id, rule.limits)
  if (taken.kind !== 'ok') throw new Error(`A not admitted: ${taken.kind}`)
  await sleep(lagAfterReplyMs)
  const left = await redisNow(admin) // A's request written now (reaches TI)
  a.leaving(rule.id, rule.limits, taken.id)
  // The re-time is fire-and-forget: wait until Redis holds the send at its departure (or give up).
  const log = `${PREFIX}log:${rule.limits[0]?.text ?? ''}:${rule.id}`
  let retimed = false
  for (let i = 0; i < 500 && !retimed; i++) {
    retimed = Number(await admin.zscore(log, taken.id)) >= left
    if (!retimed) await sleep(10)
  }
  t.ok(retimed, 'Redis counts the send from when it left')
  // B asks every 10 ms until Redis admits it.
  for (;;) {
    const b1 = await b.take(rule.id, rule.limits)
    if (b1.kind === 'ok') break
    await sleep(Math.min(10, b1.ms))
  }
  const bAt = await redisNow(admin)
  t.comment(`A left at ${left}, B admitted ${bAt - left} ms later (limit 1/1s)`)
  return bAt - left
}

t.test('a reply processed 200 ms after Redis ran the take, the send leaving at once: re-timed, the next waits a window', async (t) => {
  const gap = await scenario(t, 200, 0)
  t.ok(gap >= 950, `B admitted ${gap} ms after A's send left`)
})

t.test('control: the same 200 ms spent after the reply (measured late): re-timed, B waits a window', async (t) => {
  const gap = await scenario(t, 0, 200)
  t.ok(gap >= 950, `B admitted ${gap} ms after A's send left`)
})
