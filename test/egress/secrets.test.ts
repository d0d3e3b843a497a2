import t, { type Test } from 'tap'
import { build, CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain } from '../helpers/process.js'
import { downPort } from '../helpers/recording-proxy.js'
import { send, startTiBehindProxy, TI_CERT_FILE, trustTestCa } from './setup.js'

// The proxy password is a secret: in no log line, /status, /readyz, check-config, error
// answer or metric, whatever happens — accepted, refused (407), the proxy down.
trustTestCa()

const USER = 'egress'
const PASSWORD = 'pr0xy-s3cret@x' // percent-encoded in the URL
const URL_PASSWORD = encodeURIComponent(PASSWORD)
const forbidden = [PASSWORD, URL_PASSWORD, Buffer.from(`${USER}:${PASSWORD}`).toString('base64')]

function clean (t: Test, where: string, text: string): void {
  for (const secret of forbidden) t.notOk(text.includes(secret), `${where}: no ${secret === PASSWORD ? 'password' : secret === URL_PASSWORD ? 'encoded password' : 'Basic credentials'}`)
}

for (const scene of ['accepted', 'refused', 'down'] as const) {
  t.test(`the proxy ${scene}: the password is in no output`, async (t) => {
    const ti = await startTiBehindProxy(t, { credentials: scene === 'refused' ? `${USER}:other` : `${USER}:${PASSWORD}` })
    const proxy = scene === 'down' ? `http://${USER}:${URL_PASSWORD}@127.0.0.1:${await downPort()}` : ti.proxy.urlWith(`${USER}:${URL_PASSWORD}`)
    // The token direct (loopback) once the proxy is down, so that the store call reaches it.
    const auth = scene === 'down' ? (await startStandIn(t)).url : ti.authUrl
    const { proxyUrl, adminUrl, logs } = await build(t, { AUTH_URL: auth, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: proxy, LOG_LEVEL: 'trace' })
    const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
    if (scene !== 'accepted') t.ok(answer.status !== undefined && answer.status >= 500, `an error answer (${answer.status ?? 'none'})`)
    clean(t, 'the answer', answer.body.toString() + answer.rawHeaders.join('\n'))
    for (const path of ['/status', '/readyz', '/metrics']) clean(t, path, await (await fetch(adminUrl + path)).text())
    clean(t, 'the log', logs.text())
    t.match(await (await fetch(`${adminUrl}/status`)).json(), { config: { HTTPS_PROXY: /^http:\/\/127\.0\.0\.1:\d+$/ } })
  })
}

const env = (proxy: string): Record<string, string> => ({
  AUTH_URL: 'https://transact.ti.test',
  UPSTREAM_URL: 'https://store.ti.test',
  CLIENT_ID,
  CLIENT_SECRET,
  HTTPS_PROXY: proxy,
  NO_PROXY: 'internal.example',
  PORT: '0',
  ADMIN_PORT: '0',
  ADMIN_HOST: '127.0.0.1'
})

t.test('check-config shows the proxy as scheme://host:port, and a bad one without its value', async (t) => {
  const valid = runMain(t, ['check-config'], env(`http://${USER}:${URL_PASSWORD}@proxy.corp:3128`))
  t.equal(await valid.exited, 0)
  t.match(valid.stdout(), /"egressProxy":\{"HTTPS_PROXY":"http:\/\/proxy\.corp:3128","HTTP_PROXY":"","NO_PROXY":"internal\.example",/)
  t.match(valid.stdout(), /"tokenRoute":"via http:\/\/proxy\.corp:3128","upstreamRoute":"via http:\/\/proxy\.corp:3128"\}/)
  clean(t, 'check-config', valid.stdout() + valid.stderr())
  const invalid = runMain(t, ['check-config'], env(`socks5://${USER}:${URL_PASSWORD}@proxy.corp:1080`))
  t.equal(await invalid.exited, 1)
  t.match(invalid.stderr(), /HTTPS_PROXY: must be http:\/\//)
  clean(t, 'check-config refusing it', invalid.stdout() + invalid.stderr())
})

t.test('serve: the start log shows the proxy without credentials; NODE_EXTRA_CA_CERTS trusts TI through the tunnel', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: `${USER}:${PASSWORD}` })
  const running = runMain(t, [], { ...env(ti.proxy.urlWith(`${USER}:${URL_PASSWORD}`)), NODE_EXTRA_CA_CERTS: TI_CERT_FILE })
  await running.waitFor(/access token acquired/)
  const started = await running.waitFor(/^.*"msg":"store-auth-proxy started".*$/m)
  t.match(started[0], /"egressProxy":\{"HTTPS_PROXY":"http:\/\/127\.0\.0\.1:\d+"/)
  t.equal(ti.standIn.tokensIssued(), 1)
  running.child.kill('SIGTERM')
  await running.exited
  clean(t, 'the process output', running.stdout() + running.stderr())
})

t.test('TLS is verified through the tunnel: without TI\'s CA, no token', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: `${USER}:${PASSWORD}` })
  const running = runMain(t, [], env(ti.proxy.urlWith(`${USER}:${URL_PASSWORD}`)))
  const failed = await running.waitFor(/^.*"outcome":"network_error".*$/m)
  t.match(failed[0], /token endpoint unreachable \((SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_VERIFY_LEAF_SIGNATURE)\)/)
  t.equal(ti.standIn.tokensIssued(), 0)
  t.ok(ti.proxy.seen.length > 0 && ti.proxy.seen.every((s) => s.kind === 'connect'), 'the tunnel was open: TLS inside it refused the certificate')
})
