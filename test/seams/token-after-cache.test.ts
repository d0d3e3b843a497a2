// Where the features meet, case 4: the cache is asked before the token. A stored answer (fresh, or stale within
// stale=) needs no token and never waits for one: with the token lapsed and the OAuth API down,
// the catalog is still served. Only a fetch needs the token; its failure answers the fetch's waiters.
import t, { type Test } from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startFaultyTokenEndpoint } from '../helpers/faulty-token-endpoint.js'
import { CATALOG, HOUR, cacheSidecar, catalogBody, startTi, type CacheSidecar } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: `GET ${CATALOG} 1/4h cache=4h stale=1d`, RATE_LIMIT_MAX_WAIT_MS: '0', TOKEN_WAIT_MS: '200' }

/** A sidecar whose token endpoint the test can take down; the catalog stored once. */
async function catalogStored (t: Test) {
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: HOUR })
  const oauth = await startFaultyTokenEndpoint(t, standIn.url)
  const s = await cacheSidecar(t, ti, ENV, { authUrl: oauth.url })
  const first = await s.get(CATALOG)
  t.equal(first.status, 200)
  t.match(first.headers['cache-status'], '; stored')
  return { ti, oauth, s }
}

/** The OAuth API down, and the sidecar's clock moved past its token's life. */
async function tokenLapsed (t: Test, s: CacheSidecar, oauth: Awaited<ReturnType<typeof startFaultyTokenEndpoint>>, ms: number) {
  oauth.setFault('error500')
  await s.clock.tick(ms)
  await eventually(t, 'no token held, none on its way', () => {
    const state = s.app.tokens.state()
    return !state.hasValidToken && !state.refreshing
  })
}

t.test('case 4: with the token lapsed and the OAuth API down, a fresh hit gets 200 and a stale one 200 with its Cache-Status', async (t) => {
  const { ti, oauth, s } = await catalogStored(t)
  await tokenLapsed(t, s, oauth, 2 * HOUR)
  const asked = oauth.requests()
  const fresh = await s.get(CATALOG)
  t.equal(fresh.status, 200, 'a fresh hit needs no token')
  t.equal(fresh.body, catalogBody())
  t.match(fresh.headers['cache-status'], /^store-auth-proxy; hit; ttl=\d+$/)
  const head = await s.get(CATALOG, {}, 'HEAD')
  t.equal(head.status, 200, 'a HEAD hit too')

  // Past cache=4h, within stale=1d: the refresh would need a token there is none of; the stored
  // answer is served at once, saying why it was not refreshed.
  await s.clock.tick(3 * HOUR)
  const stale = await s.get(CATALOG)
  t.equal(stale.status, 200, 'a stale hit within stale= needs no token either')
  t.equal(stale.body, catalogBody())
  t.match(stale.headers['cache-status'], /^store-auth-proxy; hit; ttl=-\d+; detail=stale-token$/)
  t.equal(ti.received.length, 1, 'TI saw the first fetch only')
  t.ok(oauth.requests() - asked <= 1, 'no token request per hit')
  const m = await scrape(s.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_errors_total', { code: 'TOKEN_UNAVAILABLE' })) ?? 0, 0, 'nobody was told TOKEN_UNAVAILABLE')
})

t.test('case 4: a caller\'s no-cache with no token at hand gets the fresh stored answer, marked no-refresh-token', async (t) => {
  const { ti, oauth, s } = await catalogStored(t)
  await tokenLapsed(t, s, oauth, 2 * HOUR)
  const asked = await s.get(CATALOG, { 'cache-control': 'no-cache' })
  t.equal(asked.status, 200)
  t.match(asked.headers['cache-status'], /; hit; ttl=\d+; detail=no-refresh-token$/)
  t.equal(ti.received.length, 1)
})

t.test('case 4: a miss needs the token: with none to be had, the fetch and every caller waiting for it get 503 TOKEN_UNAVAILABLE at once', async (t) => {
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: HOUR })
  const oauth = await startFaultyTokenEndpoint(t, standIn.url)
  const s = await cacheSidecar(t, ti, ENV, { authUrl: oauth.url })
  oauth.setFault('hang')
  await s.clock.tick(2 * HOUR)
  await eventually(t, 'the token lapsed, its refresh hanging', () => {
    const state = s.app.tokens.state()
    return !state.hasValidToken && state.refreshing
  })
  const answers = await Promise.all(Array.from({ length: 4 }, async () => await s.get(CATALOG)))
  t.same(answers.map((a) => a.status), [503, 503, 503, 503])
  t.ok(answers.every((a) => a.body.includes('TOKEN_UNAVAILABLE')))
  t.ok(answers.every((a) => a.headers['retry-after'] !== undefined), 'with a Retry-After')
  t.equal(ti.received.length, 0, 'nothing was sent without a token')
})
