import t, { type Test } from 'tap'
import { REJECTED_RETRY_MS } from '../../src/token/token-manager.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { scrape, scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { downPort } from '../helpers/recording-proxy.js'
import { ID_HEADER } from '../helpers/recording-upstream.js'
import { send, startTiBehindProxy, TOKEN_HOST, trustTestCa } from './setup.js'

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

t.test('407 on the token request: /readyz names the proxy, not the token endpoint; retries paced, the proxy not hammered', async (t) => {
  const ti = await startTiBehindProxy(t, { credentials: 'egress:right' })
  const clock = fakeClock(Date.now())
  const { adminUrl, proxyUrl, logs, app } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.urlWith('egress:wr0ng-pw') }, { clock: clock.clock })
  const tokenConnects = (): number => ti.proxy.seen.filter((s) => s.target === `${TOKEN_HOST}:443`).length
  t.equal(tokenConnects(), 1)
  await clock.tick(500)
  await eventually(t, 'the one quick retry, answered and handled', () => tokenConnects() === 2 && app.tokens.state().consecutiveFailures === 2)
  // Past DEMAND_RETRY_INTERVAL_MS, callers could start an early attempt after a network error;
  // after a refusal they do not: each gets its 503 and the proxy is not asked again.
  await clock.tick(10_000)
  const answers = await Promise.all(Array.from({ length: 5 }, async () => await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })))
  t.same(answers.map((a) => a.status), [503, 503, 503, 503, 503])
  t.equal(tokenConnects(), 2, 'no early attempt by the callers')
  await clock.tick(REJECTED_RETRY_MS - 11_000)
  t.match(app.tokens.state(), { refreshing: false, consecutiveFailures: 2 }, 'no fast retries')
  await clock.tick(1000)
  await eventually(t, 'the slow retry, answered and handled', () => tokenConnects() === 3 && app.tokens.state().consecutiveFailures === 3)
  t.equal(ti.proxy.seen.length, 3, 'the proxy saw the token requests only')
  const errors = logs.entries().filter((e) => e.level === 50)
  t.equal(errors.length, 1, 'one ERROR for the incident')
  t.match(errors[0], { msg: 'egress proxy refused our credentials; check the user and password in HTTPS_PROXY' })

  const readyz = await fetch(`${adminUrl}/readyz`)
  t.equal(readyz.status, 503)
  t.match(await readyz.json(), { reason: 'egress proxy refused our credentials' })
  const status = await json(`${adminUrl}/status`)
  t.match(status, { ready: false, tokenRequests: { lastFailure: { outcome: 'proxy_rejected', reason: 'egress proxy refused our credentials (407)' } } })
  t.match(logs.text(), /egress proxy refused our credentials \(407\)/)
  t.notMatch(logs.text(), /token endpoint unreachable/)
  const metrics = await scrape(adminUrl)
  t.equal(metrics.get(seriesKey('store_auth_proxy_token_requests_total', { outcome: 'proxy_rejected' })), 3)
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
