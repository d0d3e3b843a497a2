// docker-compose.yml's profile orders, read as a file: a sidecar with an idempotent route,
// the route policy and test orders, its keys in a volume, what the sidecar itself accepts.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse } from 'yaml'
import { loadConfig } from '../../src/config/load.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

interface Service { profiles?: string[], environment?: Record<string, string>, ports?: string[], volumes?: string[], read_only?: boolean }
const compose = parse(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true }) as { services: Record<string, Service>, volumes?: Record<string, unknown> }

t.test('compose profile orders: keys, the policy and test orders, its state in a volume', async (t) => {
  const orders = Object.entries(compose.services).filter(([, s]) => s.profiles?.includes('orders'))
  t.same(orders.map(([name]) => name), ['orders-sidecar'], 'one service, in the profile only')
  const sidecar = orders[0]?.[1]
  const env = sidecar?.environment ?? {}
  const config = loadConfig({ ...env, CLIENT_ID: 'id', CLIENT_SECRET: 'secret', CLIENT_ID_FILE: '', CLIENT_SECRET_FILE: '' })
  t.same(config.rateLimits.rules[0]?.idempotency, { lifetimeMs: 86_400_000, requireKey: true })
  t.same(config.policy.allowed?.map((r) => r.id), ['GET /v2/store/**', 'POST /v2/store/orders'])
  t.equal(config.policy.testOrders, true)
  t.equal(config.stateDir, '/home/nonroot')
  t.same(sidecar?.volumes, ['orders-state:/home/nonroot'], 'the state directory is a named volume: it outlives the container')
  t.ok(compose.volumes !== undefined && 'orders-state' in compose.volumes)
  t.equal(sidecar?.read_only, true, 'the root filesystem stays read-only')
  // eslint-disable-next-line no-template-curly-in-string -- compose's own interpolation
  t.same(sidecar?.ports, ['127.0.0.1:${STORE_AUTH_PROXY_ORDERS_PORT:-8088}:8080'], 'published on loopback only')
})
