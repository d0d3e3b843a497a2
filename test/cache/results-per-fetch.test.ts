// Every caller of a cached rule counts one cache result (hit, coalesced, stale, miss), whatever
// TI answered: the fetch's own caller too when TI's failure is passed on to it as it came.
import t from 'tap'
import { Agent, request } from 'undici'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startFaultyTokenEndpoint } from '../helpers/faulty-token-endpoint.js'
import { seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { HOUR, cacheSidecar, inFlight, startTi } from './fixture.js'

const RULE = 'GET /v2/store/**'
const ENV = { RATE_LIMITS: `${RULE} 100/1h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0' }
const results = (m: Samples): Record<string, number> => Object.fromEntries(['hit', 'coalesced', 'stale', 'miss']
  .map((result) => [result, m.get(seriesKey('store_auth_proxy_cache_requests_total', { rule: RULE, result })) ?? 0]))

for (const status of [404, 503]) {
  t.test(`a lone fetch answered ${status}: one miss`, async (t) => {
    const ti = await startTi(t)
    ti.answer(() => ({ status, body: 'no' }))
    const s = await cacheSidecar(t, ti, ENV)
    t.equal((await s.get('/v2/store/x')).status, status)
    t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 1 })
  })
}

t.test('a fetch answered 404 with three waiters: four callers, four results', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 404, body: 'none' }))
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const leader = s.get('/v2/store/x')
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 3 }, async () => await s.get('/v2/store/x'))
  await inFlight(t, s, 4)
  ti.release()
  t.same([(await leader).status, ...(await Promise.all(waiters)).map((w) => w.status)], [404, 404, 404, 404])
  t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 4 })
  t.equal(ti.received.length, 1)
})

t.test('TI answers 401 and no newer token comes: the 401 is the fetch\'s answer, counted once', async (t) => {
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: HOUR })
  const oauth = await startFaultyTokenEndpoint(t, standIn.url)
  const s = await cacheSidecar(t, ti, { ...ENV, TOKEN_WAIT_MS: '200' }, { authUrl: oauth.url })
  t.equal((await s.get('/v2/store/a')).status, 200)
  oauth.setFault('error500')
  ti.answer(() => ({ status: 401, body: 'revoked' }))
  t.equal((await s.get('/v2/store/b')).status, 401, 'TI\'s own 401, passed on')
  t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 2 })
  t.equal(ti.received.length, 2, 'not replayed: no newer token came')
})

t.test('a fill answered 401 whose caller left, nobody waiting: not replayed, one miss', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  const agent = new Agent()
  t.teardown(() => agent.destroy())
  ti.answer(() => ({ status: 401, body: 'revoked' }))
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/x', { signal: leaver.signal, dispatcher: agent }).catch(() => 'left')
  await eventually(t, 'the fill held at TI', () => ti.waiting() === 1)
  leaver.abort()
  t.equal(await left, 'left')
  await inFlight(t, s, 0)
  ti.release()
  await eventually(t, 'the fetch counted', async () => results(await s.metrics()).miss === 1)
  t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 1 })
  t.equal(ti.received.length, 1, 'nothing sent again for nobody')
})
