// Outcome unknown: a keyed request written to TI without a complete answer is never sent
// again; every retry gets 409 ORDER_OUTCOME_UNKNOWN, across a restart where a state
// directory is set, until the key expires or an operator releases it (loopback only).
import t from 'tap'
import { build, startSidecar, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { tempDir } from '../helpers/temp-dir.js'
import { codeOf, post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'
const RULES = `POST ${ORDERS} idempotency=24h require-key`
const KEY = { 'idempotency-key': '"order-1"' }

t.test('TI cuts its answer mid-body: every retry gets 409 ORDER_OUTCOME_UNKNOWN, never resent', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  ti.script(() => ({ kind: 'cut' }))
  const first = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY).catch(() => undefined)
  t.not(first?.status, 201, 'the first caller did not get a complete 201')
  for (let i = 0; i < 3; i++) {
    const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY)
    t.equal(retry.status, 409)
    t.equal(codeOf(retry), 'ORDER_OUTCOME_UNKNOWN')
    t.match(JSON.parse(retry.body.toString()).message, /may have been placed/)
  }
  t.equal(ti.orders.length, 1, 'TI received the order once')
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_idempotency_outcomes_unknown_total', { rule: `POST ${ORDERS}` }), 1)
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_idempotency_keys_unknown'), 1)
  const status = await (await fetch(`${sidecar.adminUrl}/status`)).text()
  t.match(JSON.parse(status).idempotency, {
    backend: 'memory', rules: [{ rule: `POST ${ORDERS}`, lifetimeMs: 86_400_000, key: 'header', required: true }], keys: { pending: 0, done: 0, unknown: 1 }
  }, '/status: counts')
  t.notMatch(status, 'order-1', 'never a key')
})

t.test('TI times out: 504, then 409 ORDER_OUTCOME_UNKNOWN for every retry', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES, UPSTREAM_TIMEOUT_MS: '300' })
  ti.script(() => ({ kind: 'hang' }))
  const first = await post(sidecar.proxyUrl, ORDERS, '{}', KEY)
  t.equal(first.status, 504)
  const retry = await post(sidecar.proxyUrl, ORDERS, '{}', KEY)
  t.equal(codeOf(retry), 'ORDER_OUTCOME_UNKNOWN')
  t.equal(ti.orders.length, 1)
})

t.test('the outcome unknown survives a restart with STATE_DIR, and a crash mid-request', async (t) => {
  const ti = await startTi(t)
  const standIn = await startStandIn(t)
  const stateDir = tempDir('orders-')
  const env = { AUTH_URL: standIn.url, UPSTREAM_URL: ti.url, RATE_LIMITS: RULES, STATE_DIR: stateDir }
  const one = await build(t, env)
  ti.script(() => ({ kind: 'cut' }))
  await post(one.proxyUrl, ORDERS, '{}', KEY).catch(() => undefined)
  // Held by a second order: its sidecar "crashes" (a second process takes the same state directory while it is out).
  ti.script(() => ({ kind: 'hold' }))
  const pending = post(one.proxyUrl, ORDERS, '{}', { 'idempotency-key': '"order-2"' }).catch(() => undefined)
  await eventually(t, 'TI holds the second order', () => ti.held() === 1)
  const two = await build(t, env)
  for (const key of ['"order-1"', '"order-2"']) {
    const retry = await post(two.proxyUrl, ORDERS, '{}', { 'idempotency-key': key })
    t.equal(codeOf(retry), 'ORDER_OUTCOME_UNKNOWN', `${key} held as unknown after the restart`)
  }
  ti.release()
  await pending
  await one.app.close()
  await two.app.close()
  const three = await build(t, env)
  const retry = await post(three.proxyUrl, ORDERS, '{}', KEY)
  t.equal(codeOf(retry), 'ORDER_OUTCOME_UNKNOWN', 'and after an orderly restart')
  t.equal(ti.orders.length, 2, 'each order reached TI once')
})

t.test('a 401 is replayed once with a new token (TI did not accept it): the one resend', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  let n = 0
  ti.script(() => (++n === 1 ? { kind: 'status', status: 401 } : { kind: 'answer', body: '{"order":"ok"}' }))
  const first = await post(sidecar.proxyUrl, ORDERS, '{}', KEY)
  t.equal(first.status, 201)
  const retry = await post(sidecar.proxyUrl, ORDERS, '{}', KEY)
  t.equal(retry.headers['idempotent-replayed'], 'true')
  t.equal(retry.body.toString(), '{"order":"ok"}')
  t.equal(ti.orders.length, 2, 'the 401 and its one replay')
})

t.test('POST /idempotency/release frees a key, from loopback only', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  ti.script(() => ({ kind: 'cut' }))
  await post(sidecar.proxyUrl, ORDERS, '{}', KEY).catch(() => undefined)
  const release = async (body: unknown): Promise<Response> => await fetch(`${sidecar.adminUrl}/idempotency/release`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body)
  })
  t.equal((await release({ rule: 'POST /v2/store/orders' })).status, 400, 'a key is needed')
  t.equal((await release({ rule: 'POST /v2/store/orders', key: 'other' })).status, 404, 'a key nobody holds')
  const released = await release({ rule: 'POST /v2/store/orders', key: 'order-1' })
  t.equal(released.status, 200)
  t.same(await released.json(), { released: true })
  ti.script(() => ({ kind: 'answer' }))
  const again = await post(sidecar.proxyUrl, ORDERS, '{}', KEY)
  t.equal(again.status, 201, 'sent again after the operator released it')
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_idempotency_releases_total'), 1)
})

t.test('the release route refuses anything but loopback', async (t) => {
  // The peer as Fastify sees it: a request injected from another address is refused.
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  const refused = await sidecar.app.admin.inject({
    method: 'POST', url: '/idempotency/release', remoteAddress: '10.0.0.7', payload: { rule: `POST ${ORDERS}`, key: 'order-1' }
  })
  t.equal(refused.statusCode, 403)
  t.equal(refused.json().error, 'LOOPBACK_ONLY')
})
