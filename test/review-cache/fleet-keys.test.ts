// Review of the read cache: whose answers the fleet's Redis shares, and shutting down with
// callers waiting. Regression tests failed on the code reviewed (each defect
// fixed since); PROBE tests passed on it.
import t from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { DAY, cacheSidecar, startTi } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' }

t.test('Regression: two sidecars on one credential and one Redis but different UPSTREAM_URLs serve each other\'s answers', async (t) => {
  const redis = await startRedis(t)
  const production = await startTi(t)
  production.answer(() => ({ status: 200, body: 'production catalog' }))
  const sandbox = await startTi(t)
  sandbox.answer(() => ({ status: 200, body: 'sandbox catalog' }))
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const onSandbox = await cacheSidecar(t, sandbox, ENV, options)
  const onProduction = await cacheSidecar(t, production, ENV, options)
  t.equal((await onSandbox.get('/v2/store/catalog')).body, 'sandbox catalog')
  await eventually(t, 'the sandbox answer reached Redis', async () => (await redis.command('DBSIZE')) !== ':0')
  const answer = await onProduction.get('/v2/store/catalog')
  t.equal(answer.body, 'production catalog', `the production sidecar answered with: ${answer.body} (${String(answer.headers['cache-status'])})`)
  t.equal(production.received.length, 1, 'production TI was asked')
})

t.test('PROBE: shutting down with a fetch in flight and callers waiting for it: every caller gets TI\'s answer, then the sidecar closes', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const leader = s.get('/v2/store/a')
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 5 }, async () => await s.get('/v2/store/a'))
  await eventually(t, 'six requests in flight', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 6)
  const closed = s.app.close()
  ti.release()
  const answers = await Promise.all([leader, ...waiters])
  t.same(answers.map((a) => a.status), Array(6).fill(200))
  t.ok(answers.every((a) => a.body === answers[0]?.body))
  await closed
  t.equal(ti.received.length, 1)
})
