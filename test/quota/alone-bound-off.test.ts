// No bound on spending alone where it buys nothing or is switched off: a declared fleet of one
// (its ledger is the whole tally; the count releases its entry once its replacement is present)
// and RATE_LIMIT_ALONE_MAX_MS=0. Such a sidecar tells Redis no span (its entry ends only by the
// count, as an earlier version's), and cut off it goes on spending past the bound it was given.
// The control: a fleet of two with the bound tells its span and stops at it. A real sidecar on a
// real Redis (the rule at the fleet store: alone-bound.test.ts).
import { setTimeout as delay } from 'node:timers/promises'
import t from 'tap'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'
import { backendOf, eventually, quotaSidecar } from './sidecar.js'

const RULE = '* /v2/store/**'
const TIMING = { heartbeatMs: 100, presenceTtlMs: 300, freshGraceMs: 0 }
const WINDOW_MS = 1_000
// Past when spending alone starts (the last script's send + timeout + TTL + a window: 1.5 s).
const BOUND_MS = 2_500
/** The span a bounded sidecar tells: the bound + the window, + 0.1 % of both (clock rates: fleet-alone.ts). */
const SPAN_MS = BOUND_MS + WINDOW_MS + Math.ceil((BOUND_MS + WINDOW_MS) / 1_000)

/** The span each member present told Redis (alone-spans; its leading number, whatever is stored beside it), comma-separated; '' when none. */
const spans = async (redis: FaultyRedis): Promise<string> => await redis.command('EVAL', `
  local out = {}
  for _, k in ipairs(redis.call('KEYS', '*alone-spans')) do
    local members, h = string.sub(k, 1, -12) .. 'members', redis.call('HGETALL', k)
    for i = 1, #h, 2 do
      if redis.call('ZSCORE', members, h[i]) then out[#out + 1] = string.match(h[i + 1], '^%d+') end
    end
  end
  return table.concat(out, ',')`, '0')

for (const [name, env, bounded] of [
  ['a declared fleet of one, a bound set: none', { RATE_LIMIT_FLEET_SIZE: '1', RATE_LIMIT_ALONE_MAX_MS: String(BOUND_MS) }, false],
  ['RATE_LIMIT_ALONE_MAX_MS=0 in a fleet of two: none', { RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_ALONE_MAX_MS: '0' }, false],
  ['control: a fleet of two with the bound', { RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_ALONE_MAX_MS: String(BOUND_MS) }, true]
] as Array<[string, Record<string, string>, boolean]>) {
  t.test(name, async (t) => {
    const redis = await startRedis(t)
    const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 100/1s`, RATE_LIMIT_MAX_WAIT_MS: '0', ...env },
      { redisUrl: redis.url, systemClock: true, quotaTiming: TIMING })
    await eventually(t, 'shared through Redis', async () => (await backendOf(s)) === 'redis')
    // A take late on a busy machine is decided alone (and refused, the share not yet safe): ask again.
    let m = 0
    await eventually(t, 'a send through Redis', async () => (await s.call('/v2/store/a', `shared${m++}`)).status === 200)
    t.equal(await spans(redis), bounded ? String(SPAN_MS) : '', bounded ? 'its span told' : 'no span: its entry ends only by the count')

    await redis.stop()
    const stoppedAt = Date.now()
    let n = 0
    await eventually(t, 'spending alone', async () => (await s.call('/v2/store/a', `alone${n++}`)).status === 200)
    if (bounded) {
      await eventually(t, 'the bound reached', async () => (await s.call('/v2/store/a', `ended${n++}`)).status === 429 &&
        ((await s.status()).rateLimits as { aloneEnded: boolean }).aloneEnded)
      return
    }
    // Well past the bound it was given (counted from before Redis stopped): still its budget.
    await delay(Math.max(0, stoppedAt + 2 * BOUND_MS - Date.now()))
    const late = await s.call('/v2/store/a', `late${n++}`)
    t.equal(late.status, 200, `sent, ${Date.now() - stoppedAt} ms cut off`)
    t.match((await s.status()).rateLimits, { degraded: true, aloneEnded: false })
  })
}
