// orders.*: the route policy, test orders and the state directory from the chart, rendered
// into what the sidecar's own configuration accepts.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { CHART, envOf, one, refusal, render, sidecarOf, type JsonObject } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(120_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']

t.test('left empty: nothing rendered; set: ALLOWED_ROUTES, TEST_ORDERS and STATE_DIR on an emptyDir', async (t) => {
  const plain = sidecarOf(one(await render(example), 'Deployment', 'demo-store-auth-proxy'))
  const env = envOf(plain.container)
  t.same([env.ALLOWED_ROUTES, env.TEST_ORDERS, env.STATE_DIR], [undefined, undefined, undefined])
  const objects = await render([...example, '--set-json', 'orders.allowedRoutes=["GET /v2/store/**","POST /v2/store/carts"]',
    '--set', 'orders.testOrders=true', '--set', 'orders.stateDir.enabled=true'])
  const deployment = one(objects, 'Deployment', 'demo-store-auth-proxy')
  const { container } = sidecarOf(deployment)
  const set = envOf(container)
  t.equal(set.ALLOWED_ROUTES, 'GET /v2/store/**; POST /v2/store/carts')
  t.equal(set.TEST_ORDERS, 'true')
  t.equal(set.STATE_DIR, '/var/lib/store-auth-proxy')
  const mounts = container.volumeMounts as JsonObject[]
  t.ok(mounts.some((m) => m.name === 'store-auth-proxy-state' && m.mountPath === '/var/lib/store-auth-proxy' && m.readOnly === undefined), 'mounted writable')
  const volumes = ((deployment.spec as JsonObject).template as JsonObject).spec as JsonObject
  t.ok((volumes.volumes as JsonObject[]).some((v) => v.name === 'store-auth-proxy-state' && (v.emptyDir as JsonObject).sizeLimit === '64Mi'))
  const config = loadConfig({ AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example', CLIENT_ID: 'i', CLIENT_SECRET: 's', ALLOWED_ROUTES: set.ALLOWED_ROUTES ?? '', TEST_ORDERS: set.TEST_ORDERS ?? '', STATE_DIR: set.STATE_DIR ?? '' })
  t.same(config.policy.allowed?.map((r) => r.id), ['GET /v2/store/**', 'POST /v2/store/carts'], 'read by the sidecar')
  t.equal(config.policy.testOrders, true)
  t.equal(config.stateDir, '/var/lib/store-auth-proxy')
  t.match(refusal([...example, '--set-json', 'orders.allowedRoutes=["get /x"]']), /allowedRoutes/, 'a route that is not METHOD PATH: refused by the schema')
})
