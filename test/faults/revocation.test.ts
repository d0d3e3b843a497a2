import t from 'tap'
import { request } from 'undici'
import { REPLAY_BODY_MAX_BYTES } from '../../src/proxy/plugin.js'
import { build, startStandIn } from '../helpers/build.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { startFaultyTokenEndpoint } from '../helpers/faulty-token-endpoint.js'
import { startUpstream } from '../helpers/upstream.js'

/**
 * The contract changed: invalidate() keeps the held token and a
 * replay takes its token from renewed(). proxy.ts (the lead's) still replays with
 * get(), which now returns the held token; these tests pass once it calls renewed().
 */

t.test('20 concurrent GETs on a revoked token: exactly one extra token request, 20 successes', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl, app } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  t.equal(standIn.tokensIssued(), 1)
  const before = app.tokens.current()
  standIn.revokeAll()
  const statuses = await Promise.all(Array.from({ length: 20 }, async () => {
    const res = await request(proxyUrl + '/v2/store/products/LM358BIDR?currency=USD')
    await res.body.dump()
    return res.statusCode
  }))
  t.same(statuses, Array(20).fill(200))
  t.equal(standIn.tokensIssued(), 2)
  t.not(app.tokens.current()?.generation, before?.generation)
})

t.test('a small POST body is kept and replayed byte for byte after a 401', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  standIn.revokeAll()
  const body = JSON.stringify({ lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 10 }] })
  const res = await request(proxyUrl + '/v2/store/orders', { method: 'POST', body, headers: { 'content-type': 'application/json' } })
  t.equal(res.statusCode, 201)
  t.match(await res.body.json(), { orderStatus: 'Processing', lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 10 }] })
  t.equal(standIn.tokensIssued(), 2)
})

t.test('the replay sends the same headers and body; the 401\'s headers do not leak into the answer', async (t) => {
  const standIn = await startStandIn(t)
  let first = true
  const upstream = await startUpstream(t, (_req, res, received) => {
    if (first) {
      first = false
      res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"', 'x-first': '1' })
      res.end('{"fault":{"faultstring":"Invalid Access Token"}}')
      return
    }
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.end(`got ${received.body.length}`)
  })
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  const payload = Buffer.alloc(1000, 'x')
  const res = await request(proxyUrl + '/raw?a=1', { method: 'PUT', body: payload })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'got 1000')
  t.equal(res.headers['www-authenticate'], undefined)
  t.equal(res.headers['x-first'], undefined)
  const [a, b] = upstream.received
  t.equal(b?.url, a?.url)
  t.same(b?.body, a?.body)
  t.equal(b?.headers['content-type'], undefined, 'no content type added to a body sent without one')
  t.equal(b?.headers['content-length'], '1000')
  t.not(b?.headers.authorization, a?.headers.authorization, 'replayed with the new token')
})

t.test(`a body over ${REPLAY_BODY_MAX_BYTES} bytes is streamed, not kept: the 401 goes back`, async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  standIn.revokeAll()
  const res = await request(proxyUrl + '/v2/store/orders', {
    method: 'POST', body: Buffer.alloc(REPLAY_BODY_MAX_BYTES + 1, 'a'), headers: { 'content-type': 'application/json' }
  })
  t.equal(res.statusCode, 401)
  t.match(await res.body.json(), { fault: { faultstring: 'Access Token expired' } })
})

t.test('an upstream that answers 401 to everything does not cause a token-request storm', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startUpstream(t, (_req, res) => { res.writeHead(401); res.end() })
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  for (let i = 0; i < 50; i++) {
    const res = await request(proxyUrl + '/x')
    await res.body.dump()
    t.equal(res.statusCode, 401)
  }
  t.equal(standIn.tokensIssued(), 2, 'the start-up token and one forced refresh')
  t.equal(upstream.received.length, 51, 'one replay only')
})

t.test('revoked, and no new token can be had: the upstream\'s 401 goes back, the token is kept', async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startUpstream(t, (_req, res) => { res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' }); res.end('{"fault":"x"}') })
  const { proxyUrl, app } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, TOKEN_WAIT_MS: '200' })
  await standIn.app.close()
  const held = app.tokens.current()
  const res = await request(proxyUrl + '/x')
  t.equal(res.statusCode, 401, 'the upstream\'s own answer, not 503')
  t.equal(res.headers['www-authenticate'], 'Bearer error="invalid_token"')
  t.equal(await res.body.text(), '{"fault":"x"}')
  t.equal(app.tokens.current(), held, 'the token is kept until a new one arrives')
  t.equal(upstream.received.length, 1, 'no replay without a new token')
})

t.test('one 401 that is not about the token (InvalidApiKeyForGivenResource), token endpoint down: later calls still get the held token', async (t) => {
  const standIn = await startStandIn(t)
  const endpoint = await startFaultyTokenEndpoint(t, standIn.url)
  const upstream = await startUpstream(t, (req, res) => {
    if (req.url === '/unsubscribed') {
      // Apigee: the app is not subscribed to that API product; the token is fine.
      res.writeHead(401, { 'content-type': 'application/json' })
      res.end('{"fault":{"faultstring":"Invalid ApiKey for given resource","detail":{"errorcode":"oauth.v2.InvalidApiKeyForGivenResource"}}}')
      return
    }
    res.writeHead(200)
    res.end('ok')
  })
  // A fake clock: the failed refresh's backoff retry must not fire during the test.
  const { proxyUrl, app } = await build(t, { AUTH_URL: endpoint.url, UPSTREAM_URL: upstream.url, TOKEN_WAIT_MS: '200' }, { clock: fakeClock(Date.now()).clock })
  const held = app.tokens.current()
  endpoint.setFault('error500')
  const unsubscribed = await request(proxyUrl + '/unsubscribed')
  t.equal(unsubscribed.statusCode, 401)
  t.match(await unsubscribed.body.json(), { fault: { detail: { errorcode: 'oauth.v2.InvalidApiKeyForGivenResource' } } }, 'the upstream\'s real answer')
  const later = await Promise.all(Array.from({ length: 10 }, async () => {
    const res = await request(proxyUrl + '/v2/store/products/LM358BIDR')
    await res.body.dump()
    return res.statusCode
  }))
  t.same(later, Array(10).fill(200), 'no 503: the valid token was not thrown away')
  t.equal(app.tokens.current(), held)
  t.equal(endpoint.requests(), 2, 'the start-up token and one forced refresh attempt')
  const authorizations = new Set(upstream.received.map((r) => r.headers.authorization))
  t.equal(authorizations.size, 1, 'every request carried the held token')
})
