// A send decided alone while cut off that still waits when Redis answers again: the
// reassertion puts it in the fleet's tally and renewals keep it there. Cut off again before it
// leaves, it leaves late: the fleet counts it from its last renewal, TI from when it left, and
// another sidecar could spend its place (found by an outside review: 3 in 900 ms under 2/1s).
// Placed by the reassertion, it is refused as it leaves. Control: one Redis admitted.
import t, { type Test } from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { startRedis } from '../helpers/redis.js'
import { mostIn, sleep } from './late-upstream.js'
import { cuttable, fleetMember, spendUntil, until } from './real-time-member.js'

const rule = parseRules('GET /x 2/1s', 'RATE_LIMITS').rules[0]
if (rule === undefined) throw new Error('a rule')
const { id: scope, limits } = rule
const PREFIX = 'late-reasserted:'

async function scenario (t: Test, alone: boolean): Promise<{ most: number, refused: boolean }> {
  const server = await startRedis(t)
  let link: ReturnType<typeof cuttable> | undefined
  const a = await fleetMember(t, server.url, PREFIX, rule as NonNullable<typeof rule>, (r) => { link = cuttable(r); return link.redis })
  const b = await fleetMember(t, server.url, PREFIX, rule as NonNullable<typeof rule>)
  if (link === undefined) throw new Error('wrapped')
  const cutA = link
  await until('both shared', () => a.status().state === 'shared' && b.status().state === 'shared')
  let x = ''
  if (alone) {
    cutA.cut()
    await until('A degraded', () => a.status().state === 'degraded')
    // A decides alone once its share is free (a window after Redis could last count it present).
    await until('A admits alone', async () => {
      const taken = await a.take(scope, limits)
      if (taken.kind === 'ok') x = taken.id
      return taken.kind === 'ok'
    })
    cutA.heal()
    await until('A shared again (X told to Redis)', () => a.status().state === 'shared')
  } else {
    const taken = await a.take(scope, limits)
    if (taken.kind !== 'ok') throw new Error('admitted')
    x = taken.id
  }
  await sleep(700)
  cutA.cut()
  await until('A degraded again', () => a.status().state === 'degraded')
  const cutAt = performance.now()
  const arrivals: number[] = []
  let refused = false
  const aLeft = sleep(1_500).then(() => {
    if (a.leaving(scope, limits, x) === undefined) arrivals.push(performance.now())
    else {
      refused = true
      a.refund(scope, limits, x)
    }
  })
  await spendUntil(b, rule as NonNullable<typeof rule>, cutAt + 2_500, arrivals)
  await aLeft
  const first = Math.min(...arrivals)
  t.comment(`X refused ${refused}; arrivals (ms) ${arrivals.sort((p, q) => p - q).map((v) => Math.round(v - first)).join(',')}`)
  return { most: mostIn(arrivals, 900), refused }
}

t.test('decided alone, told to Redis again, cut off again while it waits: refused as it leaves', async (t) => {
  const { most, refused } = await scenario(t, true)
  t.ok(refused)
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})

t.test('control: admitted by Redis, cut off while it waits: refused as it leaves', async (t) => {
  const { most, refused } = await scenario(t, false)
  t.ok(refused)
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})
