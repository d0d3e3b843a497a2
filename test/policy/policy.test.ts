// The route policy (ALLOWED_ROUTES) and test-order mode (TEST_ORDERS), from the environment.
import t from 'tap'
import { startSidecar } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { describePolicy, parseAllowedRoutes } from '../../src/config/orders.js'
import { testOrderPath } from '../../src/policy/test-orders.js'
import { codeOf, post, startTi } from '../idempotency/ti.js'

const ENV = { AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://store.example', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }

t.test('outside ALLOWED_ROUTES: 403 ROUTE_NOT_ALLOWED before anything is sent, logged and counted', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { ALLOWED_ROUTES: 'GET /v2/store/**; POST /v2/store/carts' })
  const order = await post(sidecar.proxyUrl, '/v2/store/orders', '{"sku":1}')
  t.equal(order.status, 403)
  t.equal(codeOf(order), 'ROUTE_NOT_ALLOWED')
  t.match(JSON.parse(order.body.toString()).message, /the POST method on this path is not allowed/)
  t.equal(ti.orders.length, 0, 'nothing reached TI')
  t.equal((await post(sidecar.proxyUrl, '/v2/store/carts', '{}')).status, 201, 'an allowed route goes on')
  const read = await fetch(`${sidecar.proxyUrl}/v2/store/products/catalog`)
  t.equal(read.status, 201, 'GET under /v2/store/** goes on')
  const head = await fetch(`${sidecar.proxyUrl}/v2/store/x`, { method: 'HEAD' })
  t.equal(head.status, 201, 'a GET route allows HEAD')
  t.equal((await fetch(`${sidecar.proxyUrl}/v2/store/x`, { method: 'DELETE' })).status, 403)
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_policy_refused_total', { method: 'POST' }), 1)
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_errors_total', { code: 'ROUTE_NOT_ALLOWED' }), 2)
  t.ok(sidecar.logs.entries().some((l) => l.msg === 'request refused by the route policy' && l.method === 'POST'))
  const status = await (await fetch(`${sidecar.adminUrl}/status`)).json() as { config: Record<string, unknown> }
  t.equal(status.config.ALLOWED_ROUTES, 'GET /v2/store/**; POST /v2/store/carts')
  t.equal(status.config.TEST_ORDERS, false)
})

t.test('TEST_ORDERS: POST /v2/store/orders goes to /v2/store/orders/test; nothing else changes', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, `${ti.url}/base`, { TEST_ORDERS: 'true', RATE_LIMITS: 'POST /v2/store/orders idempotency=1h' })
  await post(sidecar.proxyUrl, '/v2/store/orders?x=1', '{}', { 'idempotency-key': '"t1"' })
  await post(sidecar.proxyUrl, '/v2/store/orders/42/lines', '{}')
  await fetch(`${sidecar.proxyUrl}/v2/store/orders`)
  t.same(ti.orders.map((o) => `${o.method} ${o.url}`), [
    'POST /base/v2/store/orders/test?x=1', 'POST /base/v2/store/orders/42/lines', 'GET /base/v2/store/orders'
  ])
  const replay = await post(sidecar.proxyUrl, '/v2/store/orders?x=1', '{}', { 'idempotency-key': '"t1"' })
  t.equal(replay.headers['idempotent-replayed'], 'true', 'keys still see the caller\'s path')
})

t.test('testOrderPath: only a POST of exactly the orders path, normalised as rules are', async (t) => {
  const cases: Array<[string, string, string, string]> = [
    ['POST', '/v2/store/orders', '', '/v2/store/orders/test'],
    ['POST', '/b/v2/store/orders/', '/b', '/b/v2/store/orders/test'],
    ['POST', '/b/v2/store/%6frders?q=1', '/b', '/b/v2/store/orders/test?q=1'],
    ['POST', '/v2/store/orders/test', '', '/v2/store/orders/test'],
    ['POST', '/v2/store/orders/1', '', '/v2/store/orders/1'],
    ['POST', '/v2/store', '', '/v2/store'],
    ['POST', '/v2/shop/orders', '', '/v2/shop/orders'],
    ['PUT', '/v2/store/orders', '', '/v2/store/orders'],
    ['POST', '/other/v2/store/orders', '/b', '/other/v2/store/orders']
  ]
  for (const [method, path, base, expected] of cases) t.equal(testOrderPath(method, path, base), expected, `${method} ${path}`)
})

t.test('ALLOWED_ROUTES and STATE_DIR from the environment, every problem named', async (t) => {
  const config = loadConfig({ ...ENV, ALLOWED_ROUTES: 'GET /v2/store/**\n# reads only\n* /v2/store/carts/*', TEST_ORDERS: 'true', STATE_DIR: '/var/lib/sap' })
  t.same(config.policy.allowed?.map((r) => r.id), ['GET /v2/store/**', '* /v2/store/carts/*'])
  t.equal(config.policy.testOrders, true)
  t.equal(config.stateDir, '/var/lib/sap')
  t.same(describePolicy(config.policy), { allowedRoutes: ['GET /v2/store/**', '* /v2/store/carts/*'], testOrders: true })
  const plain = loadConfig(ENV)
  t.same([plain.policy.allowed, plain.policy.testOrders, plain.stateDir], [undefined, false, undefined])
  t.same(describePolicy(plain.policy), { allowedRoutes: 'all', testOrders: false })
  t.equal(loadConfig({ ...ENV, STATE_DIR: '' }).stateDir, undefined, 'empty: none')
  t.throws(() => loadConfig({ ...ENV, STATE_DIR: 'relative/dir', ALLOWED_ROUTES: 'get /x; GET x; GET /a/**/b; GET; ;' }), new ConfigError([
    'STATE_DIR: must be an absolute path (a directory for durable state), or empty for none',
    'ALLOWED_ROUTES: route 1 "get /x": method "get" must be an upper-case HTTP method or *',
    'ALLOWED_ROUTES: route 2 "GET x": path "x" must start with /',
    'ALLOWED_ROUTES: route 3 "GET /a/**/b": path "/a/**/b": ** may only be the last segment',
    'ALLOWED_ROUTES: route 4 "GET": must be METHOD PATH (e.g. GET /v2/store/**)'
  ]))
  const problems: string[] = []
  t.same(parseAllowedRoutes(' ; # nothing', problems), [])
  t.same(problems, ['ALLOWED_ROUTES: names no route: leave it unset to allow every route'])
  const extra: string[] = []
  parseAllowedRoutes('GET /a 5/1s', extra)
  t.match(extra, [/must be METHOD PATH/])
})
