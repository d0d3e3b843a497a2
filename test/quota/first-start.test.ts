// A first start on a brand-new Redis holds /readyz until the fleet's tally can be
// trusted (the fresh-epoch grace), and answers its first routed call; it never says ready
// while it would refuse every budgeted call. Later a Redis emptied under a ready fleet keeps
// it ready (pulling every pod at once would move nothing), with the note saying why.
import t from 'tap'
import { request } from 'undici'
import { startRedis } from '../helpers/redis.js'
import { scriptedFleet } from './fleet-double.js'
import { eventually, quotaSidecar } from './sidecar.js'

const GRACE_MS = 3_000

async function readyz (adminUrl: string): Promise<{ status: number, body: { status: string, reason: string } }> {
  const res = await request(adminUrl + '/readyz')
  return { status: res.statusCode, body: await res.body.json() as { status: string, reason: string } }
}

t.test('a first start on a brand-new Redis holds /readyz until its tally can be trusted, then answers the first call', async (t) => {
  const redis = await startRedis(t)
  // A generous timeout: the first connection must not time out on a busy machine.
  const s = await quotaSidecar(t, { RATE_LIMITS: 'GET /v2/store/** 3/6s', RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '5000' },
    { redisUrl: redis.url, quotaTiming: { freshGraceMs: GRACE_MS } })
  const held = await readyz(s.adminUrl)
  t.equal(held.status, 503, 'not ready while the new tally settles')
  t.match(held.body.reason, /^rate-limit redis redis:\/\/127\.0\.0\.1:\d+ is new or lost its data: the fleet's tally is trusted in a moment/)
  t.notMatch(held.body.reason, /in a moment: its tally is new/, 'said once, not again as a note')
  t.match(await s.status(), { ready: false, reason: /is new or lost its data/, rateLimits: { backend: 'memory', degraded: false } })

  await s.clock.tick(GRACE_MS - 1)
  t.equal((await readyz(s.adminUrl)).status, 503, 'still settling 1 ms before the grace ends')
  await s.clock.tick(1)
  const ready = await readyz(s.adminUrl)
  t.equal(ready.status, 200)
  t.equal(ready.body.reason, 'token held', 'nothing left to note')
  const first = await s.call('/v2/store/products/catalog', 'first')
  t.equal(first.status, 200, 'the first routed call is answered, not refused')
  t.equal(s.upstream.received.length, 1)

  // Ready once: a Redis that comes back empty settles again, with the sidecar ready (a note).
  await redis.restart({ withData: false })
  await eventually(t, 'the emptied Redis found, its new tally settling', async () => /in a moment: its tally is new/.test((await readyz(s.adminUrl)).body.reason))
  t.equal((await readyz(s.adminUrl)).status, 200, 'still ready: the whole fleet would leave rotation at once')
})

t.test('the hold is for the first contact only: an old epoch, or Redis away at start, leaves the sidecar ready', async (t) => {
  const old = await scriptedFleet(t, 'GET /a 3/6s', { timing: { freshGraceMs: GRACE_MS } })
  t.match(old.store.status(), { state: 'shared', starting: false }, 'an epoch older than the grace: trusted at once')

  const young = await scriptedFleet(t, 'GET /a 3/6s', { timing: { freshGraceMs: GRACE_MS }, before: (s) => { s.reassert = () => ({ epochAgeMs: 1_000 }) } })
  t.match(young.store.status(), { state: 'settling', starting: true }, 'an epoch made 1 s ago: 2 s left of the grace')
  await young.c.tick(GRACE_MS - 1_000 - 1)
  t.match(young.store.status(), { state: 'settling', starting: true })
  await young.c.tick(1)
  t.match(young.store.status(), { state: 'shared', starting: false })
  // A loss found later settles again, but the sidecar has had a tally it trusted.
  young.double.script.heartbeat = () => ({ code: 'epoch' })
  young.double.script.reassert = () => ({ epochAgeMs: 0, lost: true })
  await young.c.tick(200)
  await young.c.tick(0)
  t.match(young.store.status(), { state: 'settling', starting: false })

  const away = await scriptedFleet(t, 'GET /a 3/6s', { timing: { freshGraceMs: GRACE_MS }, before: (s) => { s.down = new Error('connect ECONNREFUSED') } })
  t.match(away.store.status(), { state: 'connecting', starting: false }, 'not reachable: ready, each sidecar on its share (a note says so)')
  away.double.script.down = undefined
  away.double.script.reassert = () => ({ epochAgeMs: 0 })
  await away.c.tick(200)
  await away.c.tick(0)
  t.match(away.store.status(), { state: 'settling', starting: false }, 'reached after start, the tally new: ready all along (the whole fleet may be meeting it at once)')
})
