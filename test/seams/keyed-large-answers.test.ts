// A keyed order's answer is kept whole for its key's retries up to STORED_ANSWER_MAX_BYTES
// (1 MiB), whatever else holds the same answer back: the quota guard holds a 500 (an Apigee
// rate-limit fault cools the rule down) only up to 64 KiB, and the wider hold wins.
import t from 'tap'
import { startSidecar } from '../helpers/build.js'
import { codeOf, post, startTi } from '../idempotency/ti.js'

const ORDERS = '/v2/store/orders'
const RULES = `POST ${ORDERS} idempotency=24h require-key`
const BIG_FAULT = JSON.stringify({ fault: 'validation', detail: 'x'.repeat(100 * 1024) })

for (const [status, cooldown] of [[422, '1000'], [500, '0'], [500, '1000']] as const) {
  t.test(`TI answers ${status} with 100 KiB (RATE_LIMIT_COOLDOWN_MS=${cooldown}): the key keeps it, the retry gets it`, async (t) => {
    const ti = await startTi(t)
    const s = await startSidecar(t, ti.url, { RATE_LIMITS: RULES, RATE_LIMIT_COOLDOWN_MS: cooldown })
    ti.script(() => ({ kind: 'answer', status, body: BIG_FAULT }))
    const first = await post(s.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"o-1"' })
    t.equal(`${first.status} ${first.body.length}`, `${status} ${BIG_FAULT.length}`)
    const retry = await post(s.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"o-1"' })
    t.equal(`${retry.status} ${codeOf(retry) || String(retry.headers['idempotent-replayed'])}`, `${status} true`, 'TI\'s answer, replayed')
    t.equal(retry.body.toString(), BIG_FAULT)
    t.equal(ti.orders.length, 1, 'the order reached TI once')
  })
}
