import t from 'tap'
import { build } from '../helpers/build.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { send, startTiBehindProxy, storeCalls, STORE_HOST, TOKEN_HOST } from './setup.js'

// Plain HTTP through HTTP_PROXY, in absolute form (RFC 9112 §3.2.2): the proxy sees each
// request whole, with our credentials in Proxy-Authorization.

const basic = (userinfo: string): string => `Basic ${Buffer.from(userinfo).toString('base64')}`

t.test('token and store calls in absolute form: GET, POST with a body, an early answer, a 401 replay', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:pr0xy-s3cret' }, { plain: true })
  const { proxyUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, http_proxy: ti.proxy.urlWith('egress:pr0xy-s3cret') })
  t.equal(ti.standIn.tokensIssued(), 1)

  await storeCalls(t, ti, proxyUrl)

  const targets = ti.proxy.seen.map((s) => `${s.method} ${s.target}`)
  t.ok(targets.includes(`POST http://${TOKEN_HOST}/v1/oauth/accesstoken`), 'the token request, in absolute form')
  t.ok(targets.includes(`GET http://${STORE_HOST}/v2/store/orders?x=1`), 'a store call, in absolute form')
  t.ok(ti.proxy.seen.every((s) => s.kind === 'absolute' && s.proxyAuthorization === basic('egress:pr0xy-s3cret')))
  t.notMatch(logs.text(), /pr0xy-s3cret/)
})

t.test('407 in absolute form is the proxy refusing our credentials, not an answer to pass on', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:right' }, { plain: true })
  const { adminUrl, proxyUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTP_PROXY: ti.proxy.urlWith('egress:wrong') })
  const readyz = await fetch(`${adminUrl}/readyz`)
  t.equal(readyz.status, 503)
  t.match(await readyz.json(), { reason: 'egress proxy refused our credentials' })
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
  t.equal(answer.status, 503, 'no token: the caller is told so, the 407 never reaches it')
  t.notMatch(logs.text(), /wrong/)
})

t.test('HTTPS_PROXY does not apply to http:// targets', async (t) => {
  const ti = await startTiBehindProxy(t, {}, { plain: true })
  const { adminUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.url })
  t.equal(ti.proxy.seen.length, 0)
  t.match(await (await fetch(`${adminUrl}/status`)).json(), { tokenRequests: { lastFailure: { outcome: 'network_error', reason: 'token endpoint unreachable (ENOTFOUND)' } } })
})

t.test('407 on a store call in absolute form: 502, the log names the proxy', async (t) => {
  const ti = await startTiBehindProxy(t, {}, { plain: true })
  const { proxyUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTP_PROXY: ti.proxy.url })
  ti.proxy.fault({ kind: 'refuse', status: 407 })
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders', headers: [[ID_HEADER, 'refused']] })
  t.equal(answer.status, 502)
  t.notMatch(answer.body.toString(), /Proxy-Authenticate/i, 'the proxy\'s answer is not passed on')
  t.match(JSON.parse(answer.body.toString()), { error: 'EGRESS_PROXY_AUTH_FAILED' }, 'the sidecar\'s own answer, naming the proxy')
  t.match(logs.entries().find((e) => e.msg === 'upstream request failed'), { code: 'EGRESS_PROXY_AUTH_FAILED' })
  t.equal(ti.upstream.seen('refused').length, 0)
})
