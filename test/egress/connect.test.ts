import t from 'tap'
import { build, CLIENT_SECRET } from '../helpers/build.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { ok, send, startTiBehindProxy, storeCalls, STORE_HOST, TOKEN_HOST, trustTestCa } from './setup.js'

// HTTPS through a CONNECT tunnel: the token request and the store calls, TLS verified
// against TI's certificate end to end; the proxy sees only the tunnels.
trustTestCa()

t.test('token and store calls go through the proxy\'s tunnels, with its credentials', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:pr0xy-s3cret' })
  const { proxyUrl, logs } = await build(t, {
    AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.urlWith('egress:pr0xy-s3cret')
  })
  t.equal(ti.standIn.tokensIssued(), 1, 'the first token came through the proxy')
  await storeCalls(t, ti, proxyUrl)

  // undici's ProxyAgent would send only the last of these (it turns the header list into an object).
  ti.upstream.plan('dup', { kind: 'answer', answer: ok('dup') })
  await send(proxyUrl, { method: 'GET', path: '/v2/store/orders', headers: [[ID_HEADER, 'dup'], ['X-Dup', ['a', 'c']], ['x-other', 'b']] })
  const raw = ti.upstream.seen('dup')[0]?.rawHeaders ?? []
  t.same(raw.slice(-6), ['X-Dup', 'a', 'X-Dup', 'c', 'x-other', 'b'], 'a repeated header arrives repeated, in order and spelling')

  const tunnels = ti.proxy.seen.map((s) => `${s.kind} ${s.target}`)
  t.same(new Set(tunnels), new Set([`connect ${TOKEN_HOST}:443`, `connect ${STORE_HOST}:443`]), 'only tunnels, to TI\'s names')
  t.ok(ti.proxy.seen.every((s) => s.proxyAuthorization === `Basic ${Buffer.from('egress:pr0xy-s3cret').toString('base64')}`))
  t.notMatch(logs.text(), /pr0xy-s3cret|ZWdyZXNz/, 'the proxy password is in no log line')
  t.notMatch(logs.text(), new RegExp(CLIENT_SECRET.replace(/[+/=]/g, '.')))
})
