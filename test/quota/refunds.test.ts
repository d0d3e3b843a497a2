// A budget point is given back only when nothing of the request reached the upstream: a
// connection refused spends nothing (the catalog is not locked out for 4 hours by a call TI
// never saw); once the request was written, the point stays spent, answer or not.
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { build, startStandIn } from '../helpers/build.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'

const CATALOG = '/v2/store/products/catalog'
const RULES = `GET ${CATALOG} 1/4h`

/** A port nothing listens on (yet). */
async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => { resolve() }))
  return port
}

async function listen (t: Test, port: number, handler: Parameters<typeof createServer>[1]): Promise<Server> {
  const server = createServer(handler)
  server.listen(port, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return server
}

async function sidecar (t: Test, port: number) {
  const standIn = await startStandIn(t)
  return await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: `http://127.0.0.1:${port}`, RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0' })
}

async function call (proxyUrl: string): Promise<{ status: number, retryAfter: unknown, error: unknown }> {
  const res = await request(proxyUrl + CATALOG)
  const text = await res.body.text()
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], error: text.startsWith('{') ? (JSON.parse(text) as { error?: string }).error : undefined }
}

t.test('the upstream refused the connection: nothing was written, the catalog point is given back', async (t) => {
  const port = await freePort()
  const s = await sidecar(t, port)
  t.match(await call(s.proxyUrl), { status: 502, error: 'UPSTREAM_UNREACHABLE' })
  t.match(await call(s.proxyUrl), { status: 502, error: 'UPSTREAM_UNREACHABLE' }, 'asked again, not refused: TI saw nothing')
  let seen = 0
  await listen(t, port, (_req, res) => { seen++; res.end('catalog') })
  t.match(await call(s.proxyUrl), { status: 200 }, 'once TI answers, the one catalog call of the window goes')
  t.match(await call(s.proxyUrl), { status: 429, retryAfter: '14400' }, 'and that one is spent')
  t.equal(seen, 1)
  const m = await scrape(s.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limited_total', { rule: `GET ${CATALOG}`, reason: 'budget', action: 'refused' })), 1)
})

t.test('the request reached the upstream and the connection died without an answer: the point stays spent', async (t) => {
  const port = await freePort()
  const s = await sidecar(t, port)
  let seen = 0
  await listen(t, port, (req) => { seen++; req.socket.destroy() })
  t.match(await call(s.proxyUrl), { status: 502 })
  t.equal(seen, 1, 'TI received the request')
  const refused = await call(s.proxyUrl)
  t.match(refused, { status: 429, error: 'UPSTREAM_RATE_LIMITED' }, 'TI counted it: no second call in the window')
  t.ok(Number(refused.retryAfter) > 14_390, String(refused.retryAfter))
  t.equal(seen, 1)
})
