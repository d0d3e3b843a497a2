// A real sidecar on a real Redis, cut off (Redis stopped): it spends its share alone for at
// most RATE_LIMIT_ALONE_MAX_MS, then sends nothing budgeted, with a 429 that says why and
// /readyz still 200 with a note, until Redis answers again. (The rule at the fleet store:
// alone-bound.test.ts; what Redis then releases: attacks/holds-without-end.test.ts.)
import t from 'tap'
import { request } from 'undici'
import { startRedis } from '../helpers/redis.js'
import { backendOf, eventually, quotaSidecar } from './sidecar.js'

const RULE = '* /v2/store/**'
// Short, so that spending alone starts (timeout + TTL + a window after the last script) and ends within seconds.
const TIMING = { heartbeatMs: 100, presenceTtlMs: 300, freshGraceMs: 0 }
const BOUND_MS = 3_000

t.test('cut off longer than RATE_LIMIT_ALONE_MAX_MS: nothing more is sent until Redis answers', async (t) => {
  const redis = await startRedis(t)
  const s = await quotaSidecar(t, {
    RATE_LIMITS: `${RULE} 100/1s`,
    RATE_LIMIT_MAX_WAIT_MS: '0',
    RATE_LIMIT_FLEET_SIZE: '2',
    RATE_LIMIT_ALONE_MAX_MS: String(BOUND_MS)
  }, { redisUrl: redis.url, systemClock: true, quotaTiming: TIMING })
  await eventually(t, 'shared through Redis', async () => (await backendOf(s)) === 'redis')
  // A take late on a busy machine is decided alone (and refused, the share not yet safe): ask again.
  let n = 0
  await eventually(t, 'a send through Redis', async () => (await s.call('/v2/store/a', `shared${n++}`)).status === 200)
  await redis.stop()
  await eventually(t, 'its share spent alone', async () => (await s.call('/v2/store/a', `alone${n++}`)).status === 200)
  let ended = await s.call('/v2/store/a', `ended${n++}`)
  await eventually(t, 'the bound reached', async () => {
    ended = await s.call('/v2/store/a', `ended${n++}`)
    return ended.status === 429 && /RATE_LIMIT_ALONE_MAX_MS/.test(ended.body)
  })
  t.match(JSON.parse(ended.body), { error: 'UPSTREAM_RATE_LIMITED', message: /cut off from rate-limit redis for longer than RATE_LIMIT_ALONE_MAX_MS/ })
  t.equal(ended.headers['retry-after'], '1')
  const sent = s.upstream.received.length
  for (let i = 0; i < 20; i++) t.equal((await s.call('/v2/store/a', `after${i}`)).status, 429)
  t.equal(s.upstream.received.length, sent, 'nothing more reached the upstream')
  const ready = await request(s.adminUrl + '/readyz')
  t.equal(ready.statusCode, 200, 'still ready: shedding quota is no reason to pull the pod')
  t.match(((await ready.body.json()) as { reason: string }).reason, /cut off for longer than RATE_LIMIT_ALONE_MAX_MS, budgeted requests are refused until it answers/)

  await redis.start()
  await eventually(t, 'back on Redis', async () => (await backendOf(s)) === 'redis')
  // Restarted empty: its tally is gated for a window, then shared again.
  await eventually(t, 'sent again', async () => (await s.call('/v2/store/a', `back${n++}`)).status === 200)
})
