// An idempotent route's key is judged before the token is asked for, as the cache is (where the features meet,
// case 4): a retry whose key holds TI's answer gets it replayed with no token at hand, and a
// refusal (422, 409) needs none either. Only a request that will be sent waits for the token;
// if none comes, it is refused unsent and its key is free again.
import t from 'tap'
import { request } from 'undici'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startFaultyTokenEndpoint } from '../helpers/faulty-token-endpoint.js'
import { HOUR, cacheSidecar, startTi } from '../cache/fixture.js'

const ORDERS = '/v2/store/orders'
const ENV = { RATE_LIMITS: `POST ${ORDERS} idempotency=24h require-key`, TOKEN_WAIT_MS: '200' }

t.test('the token lapsed and the OAuth API down: a retry gets TI\'s stored answer, a new key is refused unsent and freed', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 201, headers: { 'content-type': 'application/json' }, body: '{"orderId":"T-1"}' }))
  const standIn = await startStandIn(t, { tokenLifetimeMs: HOUR })
  const oauth = await startFaultyTokenEndpoint(t, standIn.url)
  const s = await cacheSidecar(t, ti, ENV, { authUrl: oauth.url })
  const order = async (key: string, body = '{"sku":1}') => {
    const res = await request(s.proxyUrl + ORDERS, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"` }, body })
    return { status: res.statusCode, headers: res.headers, body: await res.body.text() }
  }
  t.equal((await order('k1')).status, 201)

  oauth.setFault('error500')
  await s.clock.tick(2 * HOUR)
  await eventually(t, 'no token held, none on its way', () => {
    const state = s.app.tokens.state()
    return !state.hasValidToken && !state.refreshing
  })
  const replay = await order('k1')
  t.equal(replay.status, 201, 'the retry is TI\'s stored answer')
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.equal(replay.body, '{"orderId":"T-1"}')
  const reused = await order('k1', '{"sku":2}')
  t.equal(reused.status, 422, 'a key reused with another body is told so, not TOKEN_UNAVAILABLE')
  const fresh = await order('k2')
  t.equal(fresh.status, 503, 'a new order needs a token: refused')
  t.match(JSON.parse(fresh.body), { error: 'TOKEN_UNAVAILABLE' })
  t.equal(ti.received.length, 1, 'nothing more reached TI')
  const m = await scrape(s.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_errors_total', { code: 'TOKEN_UNAVAILABLE' })), 1, 'only the new order was refused for want of a token')

  oauth.setFault('ok')
  // The token manager's retry is on the sidecar's (fake) clock: move it past the backoff.
  await eventually(t, 'a token again', async () => {
    await s.clock.tick(30_000)
    return (await order('k2')).status === 201
  })
  t.equal(ti.received.filter((r) => r.method === 'POST').length, 2, 'k2 was free again, and placed once')
})
