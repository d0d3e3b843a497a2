import t, { type Test } from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { scrape, scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { downPort } from '../helpers/recording-proxy.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { send, startTiBehindProxy, trustTestCa } from './setup.js'

// What the proxy itself does wrong, named for what failed: our credentials refused (407),
// the CONNECT refused (status), the proxy down, the proxy silent, TI unreachable behind it,
// the tunnel dropped mid-answer. The caller's answer is 502/504; the log line and, for the
// token, /readyz and /status say which.
trustTestCa()

async function json (url: string): Promise<Record<string, unknown>> {
  return await (await fetch(url)).json() as Record<string, unknown>
}

const failedLine = (logs: { entries: () => Array<Record<string, unknown>> }) =>
  logs.entries().find((e) => e.msg === 'upstream request failed')

t.test('407 on the token request: /readyz names the proxy, not the token endpoint', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:right' })
  const { adminUrl, logs } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.urlWith('egress:wr0ng-pw') })
  const readyz = await fetch(`${adminUrl}/readyz`)
  t.equal(readyz.status, 503)
  t.match(await readyz.json(), { reason: 'egress proxy refused our credentials' })
  const status = await json(`${adminUrl}/status`)
  t.match(status, { ready: false, tokenRequests: { lastFailure: { outcome: 'proxy_rejected', reason: 'egress proxy refused our credentials (407)' } } })
  t.match(logs.text(), /egress proxy refused our credentials \(407\)/)
  t.notMatch(logs.text(), /token endpoint unreachable/)
  const metrics = await scrape(adminUrl)
  // At least the first; the token manager retries it as it would a network error.
  t.ok((metrics.get(seriesKey('store_auth_proxy_token_requests_total', { outcome: 'proxy_rejected' })) ?? 0) >= 1)
  t.equal(metrics.get(seriesKey('store_auth_proxy_token_requests_total', { outcome: 'network_error' })), undefined)
  t.equal(ti.standIn.tokensIssued(), 0)
})

t.test('the proxy down: the token request says so', async (t) => {
  const ti = await startTiBehindProxy(t)
  const { adminUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: `http://127.0.0.1:${await downPort()}` })
  const status = await json(`${adminUrl}/status`)
  t.match(status, { tokenRequests: { lastFailure: { outcome: 'proxy_error', reason: 'egress proxy could not be reached (ECONNREFUSED)' } } })
  t.match(await json(`${adminUrl}/readyz`), { reason: 'waiting for the first access token' })
})

/** The token straight from a loopback stand-in (loopback is never proxied), the store calls through `proxy`. */
async function storeBehind (t: Test, env: Record<string, string> = {}) {
  const ti = await startTiBehindProxy(t)
  const local = await startStandIn(t)
  const built = await build(t, { AUTH_URL: local.url, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.url, ...env })
  return { ...ti, ...built }
}

const cases = [
  { name: '407 on a store call', fault: { kind: 'refuse', status: 407 }, status: 502, code: 'EGRESS_PROXY_AUTH_FAILED' },
  { name: 'the CONNECT refused (403)', fault: { kind: 'refuse', status: 403 }, status: 502, code: 'EGRESS_PROXY_REFUSED' },
  { name: 'TI unreachable behind the proxy (502)', fault: { kind: 'refuse', status: 502 }, status: 502, code: 'EGRESS_TARGET_UNREACHABLE', answered: 'UPSTREAM_UNREACHABLE' },
  { name: 'the proxy silent', fault: { kind: 'silent' }, status: 504, code: 'EGRESS_PROXY_TIMEOUT' }
] as const

for (const c of cases) {
  t.test(`${c.name}: ${c.code}`, async (t) => {
    const { proxy, proxyUrl, logs } = await storeBehind(t, { UPSTREAM_TIMEOUT_MS: '1000' })
    proxy.fault(c.fault)
    const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders', headers: [[ID_HEADER, 'x']] })
    t.match(failedLine(logs), { code: c.code }, 'the log line names what failed')
    t.ok(answer.status === 502 || answer.status === 504)
    const body = JSON.parse(answer.body.toString()) as { error: string, message: string }
    t.notMatch(body.message, /127\.0\.0\.1|ti\.test/, 'no address in the answer')
    t.test('the answer carries the code', async (t) => {
      t.equal(answer.status, c.status)
      t.equal(body.error, 'answered' in c ? c.answered : c.code)
    })
  })
}

t.test('the proxy down: a store call gets 502, the log names the proxy', async (t) => {
  const ti = await startTiBehindProxy(t)
  const local = await startStandIn(t)
  const { proxyUrl, logs } = await build(t, { AUTH_URL: local.url, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: `http://127.0.0.1:${await downPort()}` })
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
  t.equal(answer.status, 502)
  t.match(failedLine(logs), { code: 'EGRESS_PROXY_UNREACHABLE' })
})

t.test('the proxy drops the tunnel mid-answer: the caller\'s answer is cut, never passed off as complete', async (t) => {
  const { proxy, upstream, proxyUrl, adminUrl } = await storeBehind(t)
  const body = Buffer.alloc(256 * 1024, 'x')
  upstream.plan('big', { kind: 'answer', answer: { status: 200, headers: [['Content-Type', 'text/plain']], body, framing: 'length' } })
  proxy.fault({ kind: 'drop', afterBytes: 64 * 1024 })
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/big', headers: [[ID_HEADER, 'big']] })
  t.equal(answer.status, 200, 'the answer had begun')
  t.equal(answer.complete, false, 'and is seen cut')
  t.ok(answer.body.length < body.length)
  const metrics = await scrapeSettled(adminUrl)
  t.equal(metrics.get(seriesKey('store_auth_proxy_requests_total', { method: 'GET', status_class: '2xx', outcome: 'truncated' })), 1)
})
