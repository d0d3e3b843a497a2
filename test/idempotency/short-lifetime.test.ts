// A key's lifetime (idempotency=) is how long TI's answer is kept. A pending key is held at
// least until its deadline, however short the lifetime: it once expired at now + lifetime, so
// with idempotency=1s an order still at TI after a second could be sent again by a retry.
import t from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { codeOf, post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'

for (const backend of ['memory', 'redis'] as const) {
  t.test(`${backend}: idempotency=1s, an order held at TI for longer: a retry is 409, TI gets it once`, async (t) => {
    const ti = await startTi(t)
    const standIn = await startStandIn(t)
    const redis = backend === 'redis' ? await startRedis(t) : undefined
    const sidecar = await build(t, {
      AUTH_URL: standIn.url,
      UPSTREAM_URL: ti.url,
      RATE_LIMITS: `POST ${ORDERS} idempotency=1s require-key`,
      ...(redis === undefined ? {} : { RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '2000' })
    }, { idempotencyTiming: { checkMs: 50, recoveryMs: 300 } })
    ti.script(() => ({ kind: 'hold' }))
    const order = async () => await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"short-1"' })
    // A new Redis has a recovery window: until it ends, a keyed order is refused unsent.
    let first = order()
    if (redis !== undefined) {
      await eventually(t, 'the first order at TI', async () => {
        if (ti.held() === 1) return true
        const early = await Promise.race([first, new Promise((resolve) => setTimeout(resolve, 100, undefined))])
        if (early !== undefined) first = order()
        return false
      })
    }
    await eventually(t, 'the first order at TI', () => ti.held() === 1)
    const heldSince = Date.now()
    // Past the key's lifetime, with the order still at TI.
    await eventually(t, 'a second and a half at TI', () => Date.now() - heldSince > 1_500)
    const retry = await order()
    t.equal(retry.status, 409, 'the retry is told the key is in use')
    t.equal(codeOf(retry), 'IDEMPOTENCY_KEY_IN_USE')
    ti.release()
    t.equal((await first).status, 201)
    t.equal(ti.orders.length, 1, 'TI got the order once')
  })
}
