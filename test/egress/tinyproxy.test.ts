import t, { type Test } from 'tap'
import { build } from '../helpers/build.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { ok, send, startTiBehindProxy, storeCalls, STORE_HOST, TOKEN_HOST, trustTestCa } from './setup.js'
import { noTinyproxy, startTinyproxy } from './tinyproxy.js'

// A real egress proxy: Debian's tinyproxy, with Basic authentication. It sends TI's test
// names on to the recording proxy (its `Upstream`), the only one that resolves them, so
// every request below went through tinyproxy or failed.
trustTestCa()

const credentials = { user: 'egress', password: 'tiny-s3cret' }
const skip = noTinyproxy

async function behindTinyproxy (t: Test, plain: boolean) {
  const ti = await startTiBehindProxy(t, {}, { plain })
  const tiny = await startTinyproxy(t, { credentials, upstreamPort: ti.proxy.port, upstreamFor: '.ti.test' })
  return { ti, tiny }
}

t.test('HTTPS through tinyproxy\'s CONNECT, with Basic authentication', { skip }, async (t) => {
  const { ti, tiny } = await behindTinyproxy(t, false)
  const { proxyUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: tiny.url(`${credentials.user}:${credentials.password}`) })
  t.equal(ti.standIn.tokensIssued(), 1)
  await storeCalls(t, ti, proxyUrl)
  t.same(new Set(ti.proxy.seen.map((s) => `${s.kind} ${s.target}`)), new Set([`connect ${TOKEN_HOST}:443`, `connect ${STORE_HOST}:443`]))
  t.notMatch(logs.text(), /tiny-s3cret/)
})

t.test('plain HTTP through tinyproxy in absolute form, with Basic authentication', { skip }, async (t) => {
  const { ti, tiny } = await behindTinyproxy(t, true)
  const { proxyUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTP_PROXY: tiny.url(`${credentials.user}:${credentials.password}`) })
  t.equal(ti.standIn.tokensIssued(), 1)
  // Not the early answer: tinyproxy does not relay it in absolute form (next test).
  await storeCalls(t, ti, proxyUrl, { early: false })
  t.ok(ti.proxy.seen.every((s) => s.kind === 'absolute'))
})

// tinyproxy 1.11 sends a request's whole body on before it reads the target's answer. When the
// target answers early (413 before reading the upload) and closes, tinyproxy's write fails (it
// logs "process_client_headers failed: Broken pipe") and it resets the connection to the
// sidecar without the answer that had arrived. The same 413 through the recording proxy alone
// reaches the caller (absolute-form.test.ts), and through tinyproxy's CONNECT too (above): the
// loss is tinyproxy's. What the sidecar can do is what it does for any upstream that drops the
// connection before answering: 502, the request sent once, never passed off as answered.
// The upload is more than the sockets between the hops can hold, so tinyproxy is still writing
// when the target closes: a 4 MiB one it had sometimes written whole, and then it read the 413
// and relayed it.
const UPLOAD_BYTES = 32 * 1024 * 1024

t.test('an early answer through tinyproxy in absolute form is lost by tinyproxy: the caller gets 502, the upload was sent once', { skip }, async (t) => {
  const { ti, tiny } = await behindTinyproxy(t, true)
  const { proxyUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTP_PROXY: tiny.url(`${credentials.user}:${credentials.password}`) })
  ti.upstream.plan('early', { kind: 'early', answer: { ...ok('too large'), status: 413 }, then: 'close' })
  const answer = await send(proxyUrl, { method: 'POST', path: '/v2/store/uploads', headers: [[ID_HEADER, 'early']], body: Buffer.alloc(UPLOAD_BYTES, 1) })
  t.equal(answer.status, 502)
  t.match(JSON.parse(answer.body.toString()), { error: 'UPSTREAM_UNREACHABLE' })
  t.equal(ti.upstream.seen('early').length, 1, 'the upload reached the target once: not sent again')
  // Reset under a write (ECONNRESET) or seen closed on a read (UND_ERR_SOCKET), as the race goes.
  const code = logs.entries().find((e) => e.msg === 'upstream request failed')?.code
  t.ok(code === 'ECONNRESET' || code === 'UND_ERR_SOCKET', `logged as the connection cut under the request (${String(code)})`)
})

for (const [name, userinfo, status] of [['no credentials', undefined, 407], ['a wrong password', `${credentials.user}:wrong`, 401]] as const) {
  t.test(`tinyproxy refuses ${name} (${status}): /readyz names the egress proxy`, { skip }, async (t) => {
    const { ti, tiny } = await behindTinyproxy(t, false)
    const { adminUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: tiny.url(userinfo) })
    const readyz = await fetch(`${adminUrl}/readyz`)
    t.equal(readyz.status, 503)
    t.match(await readyz.json(), { reason: 'egress proxy refused our credentials' })
    t.match(await (await fetch(`${adminUrl}/status`)).json(), { tokenRequests: { lastFailure: { reason: `egress proxy refused our credentials (${status})` } } })
    t.equal(ti.proxy.seen.length, 0)
  })
}
