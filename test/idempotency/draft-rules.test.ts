// The rules of draft-ietf-httpapi-idempotency-key-header, one test each, on one sidecar in
// front of a stand-in TI that records every order it receives.
import t, { type Test } from 'tap'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { codeOf, post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'
const RULES = `POST ${ORDERS} idempotency=24h require-key; POST /v2/store/carts idempotency=1h key=body:poNumber`

async function setUp (t: Test, env: Record<string, string> = {}) {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES, ...env })
  return { ti, sidecar, url: sidecar.proxyUrl }
}

t.test('missing key: 400 IDEMPOTENCY_KEY_MISSING on a route that requires one, nothing sent', async (t) => {
  const { ti, url } = await setUp(t)
  const reply = await post(url, ORDERS, '{"sku":1}')
  t.equal(reply.status, 400)
  t.equal(codeOf(reply), 'IDEMPOTENCY_KEY_MISSING')
  t.match(JSON.parse(reply.body.toString()).message, /Idempotency-Key is missing/)
  t.equal(ti.orders.length, 0)
})

t.test('a malformed key or two keys: 400 IDEMPOTENCY_KEY_INVALID', async (t) => {
  const { ti, url } = await setUp(t)
  for (const value of ['"unterminated', '""', 'has space', `"${'a'.repeat(256)}"`]) {
    const reply = await post(url, ORDERS, '{}', { 'idempotency-key': value })
    t.equal(codeOf(reply), 'IDEMPOTENCY_KEY_INVALID', value.slice(0, 20))
  }
  t.equal(ti.orders.length, 0)
})

t.test('replay: a retry gets TI\'s stored answer byte for byte, marked, without reaching TI', async (t) => {
  const { ti, url, sidecar } = await setUp(t)
  ti.script(() => ({ kind: 'answer', status: 201, headers: { 'x-ti': 'placed', 'set-cookie': 'a=1' }, body: '{"orderId":"A-1"}' }))
  const first = await post(url, ORDERS, '{"sku":1}', { 'idempotency-key': '"8e03978e-40d5-43e8-bc93-6894a57f9324"' })
  const again = await post(url, ORDERS, '{"sku":1}', { 'idempotency-key': '"8e03978e-40d5-43e8-bc93-6894a57f9324"' })
  t.equal(ti.orders.length, 1, 'TI received one order')
  t.equal(first.status, 201)
  t.equal(again.status, 201)
  t.same(again.body, first.body, 'the same body, byte for byte')
  t.equal(again.headers['x-ti'], 'placed')
  t.equal(again.headers['x-order-id'], first.headers['x-order-id'])
  t.same(again.headers['set-cookie'], first.headers['set-cookie'])
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.match(again.headers['cache-status'], /detail=idempotent-replay/)
  t.equal(first.headers['idempotent-replayed'], undefined, 'the first answer is not a replay')
  t.equal(await metricValue(sidecar.adminUrl, 'store_auth_proxy_idempotency_requests_total', { rule: `POST ${ORDERS}`, result: 'replayed' }), 1)
})

t.test('an unquoted key is the same key as its quoted form', async (t) => {
  const { ti, url } = await setUp(t)
  await post(url, ORDERS, '{}', { 'idempotency-key': 'k-1' })
  const again = await post(url, ORDERS, '{}', { 'idempotency-key': '"k-1"' })
  t.equal(again.headers['idempotent-replayed'], 'true')
  t.equal(ti.orders.length, 1)
})

t.test('concurrent: a retry while the first is in flight gets 409 IDEMPOTENCY_KEY_IN_USE with Retry-After', async (t) => {
  const { ti, url } = await setUp(t)
  ti.script(() => ({ kind: 'hold' }))
  const first = post(url, ORDERS, '{"sku":1}', { 'idempotency-key': '"k"' })
  await eventually(t, 'TI holds the first order', () => ti.held() === 1)
  const second = await post(url, ORDERS, '{"sku":1}', { 'idempotency-key': '"k"' })
  t.equal(second.status, 409)
  t.equal(codeOf(second), 'IDEMPOTENCY_KEY_IN_USE')
  t.ok(Number(second.headers['retry-after']) >= 1, 'Retry-After')
  ti.release()
  t.equal((await first).status, 201)
  t.equal(ti.orders.length, 1)
})

t.test('fingerprint mismatch: the same key with another body gets 422 IDEMPOTENCY_KEY_REUSED', async (t) => {
  const { ti, url } = await setUp(t)
  await post(url, ORDERS, '{"sku":1}', { 'idempotency-key': '"k"' })
  const other = await post(url, ORDERS, '{"sku":2}', { 'idempotency-key': '"k"' })
  t.equal(other.status, 422)
  t.equal(codeOf(other), 'IDEMPOTENCY_KEY_REUSED')
  const otherPath = await post(url, `${ORDERS}?dry=1`, '{"sku":1}', { 'idempotency-key': '"k"' })
  t.equal(otherPath.status, 422, 'another target is another request')
  t.equal(ti.orders.length, 1)
})

t.test('a key from a JSON body field, for callers that send no header; none: sent as any request', async (t) => {
  const { ti, url } = await setUp(t)
  const first = await post(url, '/v2/store/carts', '{"poNumber":"PO-7","lines":[1]}')
  const again = await post(url, '/v2/store/carts', '{"poNumber":"PO-7","lines":[1]}')
  t.equal(first.status, 201)
  t.equal(again.headers['idempotent-replayed'], 'true')
  await post(url, '/v2/store/carts', '{"lines":[1]}')
  await post(url, '/v2/store/carts', '{"lines":[1]}')
  t.equal(ti.orders.length, 3, 'no key, not required: each sent')
})

t.test('the key is per route: one key on two routes is two keys', async (t) => {
  const { ti, url } = await setUp(t)
  await post(url, ORDERS, '{"poNumber":"same"}', { 'idempotency-key': '"same"' })
  const cart = await post(url, '/v2/store/carts', '{"poNumber":"same"}', { 'idempotency-key': '"same"' })
  t.equal(cart.status, 201)
  t.equal(cart.headers['idempotent-replayed'], undefined)
  t.equal(ti.orders.length, 2)
})

t.test('what is not sent costs nothing: a request refused before it was written releases its key', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: `POST ${ORDERS} 1/1h idempotency=24h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  await post(sidecar.proxyUrl, ORDERS, '{}', { 'idempotency-key': '"a"' })
  const refused = await post(sidecar.proxyUrl, ORDERS, '{}', { 'idempotency-key': '"b"' })
  t.equal(refused.status, 429, 'the budget refuses the second order')
  const again = await post(sidecar.proxyUrl, ORDERS, '{}', { 'idempotency-key': '"b"' })
  t.equal(again.status, 429, 'its key was released: refused by the budget again, not 409')
  t.equal(ti.orders.length, 1)
})

t.test('the gateway\'s rate-limit answer (429) releases the key: TI never acted on them', async (t) => {
  // No cool-down after TI's 429: the retry goes straight on.
  const { ti, url } = await setUp(t, { RATE_LIMIT_COOLDOWN_MS: '0' })
  let first = true
  ti.script(() => {
    if (first) {
      first = false
      return { kind: 'status', status: 429 }
    }
    return { kind: 'answer' }
  })
  const limited = await post(url, ORDERS, '{}', { 'idempotency-key': '"r"' })
  t.equal(limited.status, 429)
  const again = await post(url, ORDERS, '{}', { 'idempotency-key': '"r"' })
  t.equal(again.status, 201, 'sent again: the 429 placed nothing')
  t.equal(ti.orders.length, 2)
})
