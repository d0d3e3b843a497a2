// A send decided alone, still waiting when Redis answers again, that leaves after the
// reassertion's script ran and before its reply is handled (or never is: a timeout). Redis
// has it from the script's time; not shared yet, the sidecar cannot re-time it: so it is
// placed before the script is sent, and refused as it leaves late (found by an outside
// review: 3 in 900 ms under 2/1s when placed only once the reply was handled).
import t, { type Test } from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import type { RedisStore } from '../../src/quota/redis-backend.js'
import { startRedis } from '../helpers/redis.js'
import { mostIn, sleep } from './late-upstream.js'
import { cuttable, fleetMember, spendUntil, until } from './real-time-member.js'

const rule = parseRules('GET /x 2/1s', 'RATE_LIMITS').rules[0]
if (rule === undefined) throw new Error('a rule')
const { id: scope, limits } = rule
const PREFIX = 'late-reassert-window:'

/**
 * `mode`: 'slow-reply' — the reassertion's script runs, its reply is handled 300 ms later;
 * 'timed-out' — the script runs, the reply comes after the client's timeout (an error).
 * X leaves `leaveAfter` ms after the script ran.
 */
async function scenario (t: Test, mode: 'slow-reply' | 'timed-out', leaveAfter: number): Promise<{ most: number, refused: boolean }> {
  const server = await startRedis(t)
  let link: ReturnType<typeof cuttable> | undefined
  let hook: (() => void) | undefined
  const delayed = (r: RedisStore): RedisStore => new Proxy(r, {
    get (target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (prop !== 'reassert' || typeof value !== 'function') return value
      return async (...args: unknown[]) => {
        const reply = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
        const h = hook
        if (h === undefined) return reply
        hook = undefined
        h()
        await sleep(mode === 'slow-reply' ? 300 : 200)
        if (mode === 'timed-out') throw new Error('Command timed out')
        return reply
      }
    }
  })
  const a = await fleetMember(t, server.url, PREFIX, rule as NonNullable<typeof rule>, (r) => { link = cuttable(delayed(r)); return link.redis })
  const b = await fleetMember(t, server.url, PREFIX, rule as NonNullable<typeof rule>)
  if (link === undefined) throw new Error('wrapped')
  const cutA = link
  await until('both shared', () => a.status().state === 'shared' && b.status().state === 'shared')
  let x = ''
  cutA.cut()
  await until('A degraded', () => a.status().state === 'degraded')
  await until('A admits alone', async () => {
    const taken = await a.take(scope, limits)
    if (taken.kind === 'ok') x = taken.id
    return taken.kind === 'ok'
  })
  const arrivals: number[] = []
  let refused = false
  let scriptRan = 0
  let aLeft: Promise<void> = Promise.resolve()
  hook = () => {
    scriptRan = performance.now()
    aLeft = sleep(leaveAfter).then(() => {
      if (a.leaving(scope, limits, x) === undefined) arrivals.push(performance.now())
      else {
        refused = true
        a.refund(scope, limits, x)
      }
    })
  }
  cutA.heal()
  await until('the reassertion script ran', () => scriptRan > 0)
  await spendUntil(b, rule as NonNullable<typeof rule>, scriptRan + 2_000, arrivals)
  await aLeft
  const first = Math.min(...arrivals)
  t.comment(`${mode}: X refused ${refused}; A ${a.status().state}; arrivals (ms after the script ran) ${arrivals.sort((p, q) => p - q).map((v) => Math.round(v - scriptRan)).join(',')}; first ${Math.round(first - scriptRan)}`)
  return { most: mostIn(arrivals, 900), refused }
}

t.test('the reassertion\'s reply is handled 300 ms after its script ran; X leaves 150 ms after the script', async (t) => {
  const { most, refused } = await scenario(t, 'slow-reply', 150)
  t.ok(refused, 'X refused as it leaves')
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})

t.test('the reassertion\'s reply comes after the timeout (script ran); X leaves 400 ms after the script', async (t) => {
  const { most, refused } = await scenario(t, 'timed-out', 400)
  t.ok(refused, 'X refused as it leaves')
  t.ok(most <= 2, `${most} in 900 ms (limit 2/1s)`)
})
