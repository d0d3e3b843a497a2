// The admin listener is bounded on its own (every listener bounded, case 1): beyond ADMIN_MAX_CONNECTIONS a new
// connection whose first read is not a whole head gets 503 OVERLOADED and is closed, counted and
// logged once, while one whose first read is a whole head (a probe, a scrape) is still served and
// closed after its answer; its slow heads are cut short; and it answers /livez while the proxy
// port sheds.
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { ADMIN_FIRST_READ_MS, ADMIN_HEADERS_TIMEOUT_MS, ADMIN_MAX_HEADER_BYTES } from '../../src/admin/server.js'
import { loadConfig } from '../../src/config/load.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const BOUND = 4

async function holdHead (t: Test, url: string): Promise<Socket> {
  const { hostname, port } = new URL(url)
  const socket = connect(Number(port), hostname)
  socket.on('error', () => {})
  t.teardown(() => { socket.destroy() })
  await new Promise((resolve) => socket.once('connect', resolve))
  socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n')
  return socket
}

t.test('ADMIN_MAX_CONNECTIONS: default 64, 4 to 1000', async (t) => {
  const base = { CLIENT_ID: 'a', CLIENT_SECRET: 'b', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  t.equal(loadConfig(base).admin.maxConnections, 64)
  t.equal(loadConfig({ ...base, ADMIN_MAX_CONNECTIONS: '4' }).admin.maxConnections, 4)
  t.throws(() => loadConfig({ ...base, ADMIN_MAX_CONNECTIONS: '3' }), /ADMIN_MAX_CONNECTIONS: must be at least 4/)
  t.throws(() => loadConfig({ ...base, ADMIN_MAX_CONNECTIONS: '1001' }), /ADMIN_MAX_CONNECTIONS: must be at most 1000/)
  t.equal(loadConfig({ ...base, ADMIN_MAX_CONNECTIONS: '1000' }).admin.maxConnections, 1000)
})

const UNFINISHED = 'GET /livez HTTP/1.1\r\nHost: x\r\n'
const PROBE = 'GET /livez HTTP/1.1\r\nHost: x\r\n\r\n'

t.test('beyond ADMIN_MAX_CONNECTIONS: an unfinished head gets 503 OVERLOADED and is closed, counted, logged once; room again when one closes', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl, proxyUrl, logs } = await startSidecar(t, upstream.url, { ADMIN_MAX_CONNECTIONS: String(BOUND) })
  const held: Socket[] = []
  for (let i = 0; i < BOUND; i++) held.push(await holdHead(t, adminUrl))
  // Until the listener has counted the held ones, an unfinished head may still be admitted (and cut after the header timeout).
  let raw = ''
  await eventually(t, 'the bound reached', async () => statusOf(raw = await rawRequest(adminUrl, UNFINISHED, 500)) === 503)
  t.equal(statusOf(raw), 503, 'the excess connection gets a status line')
  t.match(raw, /\r\nconnection: close\r\n/)
  t.match(raw, /\r\nretry-after: 1\r\n/)
  t.match(raw, /"error":"OVERLOADED"/)
  t.equal((await request(`${proxyUrl}/v2/store/a`)).statusCode, 200, 'the proxy port is not touched')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'connections' }), 0, 'the proxy port\'s bound is its own')
  t.ok(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'admin_connections' }) >= 1, 'counted')
  t.equal(logs.lines.filter((l) => l.includes('admin listener at ADMIN_MAX_CONNECTIONS')).length, 1, 'logged once')
  held[0]?.destroy()
  await eventually(t, 'the end logged', () => logs.text().includes('below ADMIN_MAX_CONNECTIONS again'))
  const served = await eventually(t, 'room again', async () => statusOf(await rawRequest(adminUrl, UNFINISHED, 500)) === 0)
  t.ok(served, 'a closed connection makes room: an unfinished head waits for its end again')
})

t.test('beyond ADMIN_MAX_CONNECTIONS: a whole head in the first read is served, then closed; silence gets 503 after ADMIN_FIRST_READ_MS', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl } = await startSidecar(t, upstream.url, { ADMIN_MAX_CONNECTIONS: String(BOUND) })
  for (let i = 0; i < BOUND; i++) await holdHead(t, adminUrl)
  await eventually(t, 'the bound reached', async () => statusOf(await rawRequest(adminUrl, UNFINISHED, 500)) === 503)
  const shed = await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'admin_connections' })
  for (const path of ['/livez', '/readyz', '/metrics']) {
    // Keep-alive asked: the answer closes the connection all the same (rawRequest returns at the close).
    const raw = await rawRequest(adminUrl, `GET ${path} HTTP/1.1\r\nHost: x\r\n\r\n`, 5000)
    t.equal(statusOf(raw), 200, `${path}: a probe beyond the bound is answered`)
    t.match(raw, /\r\nconnection: close\r\n/i, `${path}: and its connection closed`)
  }
  // The probes were not shed (metricValue's own scrape is one of them).
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'admin_connections' }), shed, 'no probe counted as shed')
  const started = Date.now()
  const silent = await rawRequest(adminUrl, '', ADMIN_FIRST_READ_MS + 5000)
  t.equal(statusOf(silent), 503, 'a connection that sends nothing gets 503')
  t.ok(Date.now() - started >= ADMIN_FIRST_READ_MS - 50, `after ADMIN_FIRST_READ_MS (${Date.now() - started} ms)`)
  // A probe whose head comes in two reads is refused like any unfinished head.
  const { hostname, port } = new URL(adminUrl)
  const split = connect(Number(port), hostname)
  t.teardown(() => { split.destroy() })
  let answer = ''
  split.setEncoding('latin1').on('data', (chunk: string) => { answer += chunk })
  await new Promise((resolve) => split.once('connect', resolve))
  split.write(PROBE.slice(0, 10))
  await eventually(t, 'an answer to the split head', () => answer !== '')
  t.equal(statusOf(answer), 503, 'a head split across reads gets 503')
})

t.test('the proxy port shedding on connections: /livez, /readyz and /metrics still answered', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl, proxyUrl, app } = await startSidecar(t, upstream.url, { MAX_CONNECTIONS: '2' })
  await holdHead(t, proxyUrl)
  await holdHead(t, proxyUrl)
  await eventually(t, 'the proxy port at its bound', () => app.overload.status().connections === 2)
  t.equal(statusOf(await rawRequest(proxyUrl, 'GET /v2/store/a HTTP/1.1\r\nHost: x\r\n\r\n', 5000)), 503, 'the proxy port sheds')
  for (const path of ['/livez', '/readyz', '/metrics']) t.equal((await request(adminUrl + path)).statusCode, 200, `${path} answered`)
})

t.test('an admin head larger than ADMIN_MAX_HEADER_BYTES gets 431; one not valid HTTP 400', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl } = await startSidecar(t, upstream.url)
  const big = await rawRequest(adminUrl, `GET /livez HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(ADMIN_MAX_HEADER_BYTES)}\r\n\r\n`, 5000)
  t.equal(statusOf(big), 431)
  t.equal(statusOf(await rawRequest(adminUrl, 'NOT HTTP\r\n\r\n', 5000)), 400)
})

t.test('a slow admin head is cut after ADMIN_HEADERS_TIMEOUT_MS with 408', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl } = await startSidecar(t, upstream.url)
  const socket = await holdHead(t, adminUrl)
  let answer = ''
  socket.setEncoding('latin1').on('data', (chunk: string) => { answer += chunk })
  const started = Date.now()
  await new Promise((resolve) => socket.once('close', resolve))
  t.equal(statusOf(answer), 408, 'a status line')
  t.ok(Date.now() - started < ADMIN_HEADERS_TIMEOUT_MS + 3_000, 'within the admin header timeout and a check')
})
