import t from 'tap'
import { build, CLIENT_SECRET } from '../helpers/build.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { send, startTiBehindProxy, STORE_HOST, TOKEN_HOST, trustTestCa } from './setup.js'

// HTTPS through a CONNECT tunnel: the token request and the store calls, TLS verified
// against TI's certificate end to end; the proxy sees only the tunnels.
trustTestCa()

const ok = (body: string) => ({ status: 200, headers: [['Content-Type', 'text/plain']] as Array<[string, string]>, body: Buffer.from(body), framing: 'length' as const })

t.test('token and store calls go through the proxy\'s tunnels, with its credentials', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:pr0xy-s3cret' })
  const { proxyUrl, logs } = await build(t, {
    AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.urlWith('egress:pr0xy-s3cret')
  })
  t.equal(ti.standIn.tokensIssued(), 1, 'the first token came through the proxy')

  ti.upstream.plan('get', { kind: 'answer', answer: ok('got') })
  const get = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders?x=1', headers: [[ID_HEADER, 'get']] })
  t.equal(get.status, 200)
  t.equal(get.body.toString(), 'got')

  ti.upstream.plan('post', { kind: 'answer', answer: ok('posted') })
  const body = Buffer.from('{"order":42}')
  const post = await send(proxyUrl, { method: 'POST', path: '/v2/store/orders', headers: [[ID_HEADER, 'post'], ['content-type', 'application/json']], body })
  t.equal(post.status, 200)
  t.same(ti.upstream.seen('post')[0]?.body(), body, 'the body arrived whole')
  t.equal(ti.upstream.seen('post')[0]?.url, '/v2/store/orders', 'origin form inside the tunnel')

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

t.test('an early answer and a 401 replay, through the tunnel', async (t) => {
  const ti = await startTiBehindProxy(t)
  const { proxyUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.url })

  ti.upstream.plan('early', { kind: 'early', answer: { ...ok('too large'), status: 413 }, then: 'close' })
  const early = await send(proxyUrl, { method: 'POST', path: '/v2/store/uploads', headers: [[ID_HEADER, 'early']], body: Buffer.alloc(4 * 1024 * 1024, 1) })
  t.equal(early.status, 413)
  t.equal(early.body.toString(), 'too large')

  ti.upstream.plan('replay', { kind: 'unauthorized', answer: ok('after replay') })
  const replayed = await send(proxyUrl, { method: 'POST', path: '/v2/store/orders', headers: [[ID_HEADER, 'replay']], body: Buffer.from('once more') })
  t.equal(replayed.status, 200)
  t.equal(replayed.body.toString(), 'after replay')
  const attempts = ti.upstream.seen('replay')
  t.equal(attempts.length, 2, 'replayed once')
  t.not(attempts[0]?.rawHeaders.join(), attempts[1]?.rawHeaders.join(), 'with a new token')
  t.same(attempts[1]?.body(), Buffer.from('once more'))
  t.equal(ti.standIn.tokensIssued(), 2)
})
