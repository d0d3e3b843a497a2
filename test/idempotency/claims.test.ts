// Each take of a key is a claim of its own, in memory and in the state directory too: a request
// whose key was freed while it was out (an operator's release) and taken anew by a retry never
// releases or settles the retry's key when its own answer comes.
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { tempDir } from '../helpers/temp-dir.js'
import { codeOf, post } from './ti.js'

const ORDERS = '/v2/store/orders'
const KEY = { 'idempotency-key': '"po-freed"' }

/** TI holding its first two orders until the test answers them; any later one placed at once. */
async function heldTi (t: Test) {
  const held: ServerResponse[] = []
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      held.push(res)
      if (held.length > 2) { res.writeHead(201, { 'content-type': 'application/json' }); res.end(`{"order":${held.length}}`) }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received: () => held.length,
    answer (n: number, status: number, body: string): void {
      const res = held[n]
      res?.writeHead(status, { 'content-type': 'application/json' })
      res?.end(body)
    }
  }
}

for (const store of ['memory', 'state-dir'] as const) {
  t.test(`${store}: a released claim's 429 does not free the key a retry took anew`, async (t) => {
    const ti = await heldTi(t)
    const sidecar = await startSidecar(t, ti.url, {
      RATE_LIMITS: `POST ${ORDERS} idempotency=24h require-key`,
      RATE_LIMIT_COOLDOWN_MS: '0',
      ...(store === 'state-dir' ? { STATE_DIR: tempDir('claims-') } : {})
    })
    const first = post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY)
    await eventually(t, 'TI holds the first', () => ti.received() === 1)
    // An operator frees the key while the first is out (it thought the order lost).
    const released = await fetch(`${sidecar.adminUrl}/idempotency/release`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ rule: `POST ${ORDERS}`, key: 'po-freed' })
    })
    t.equal(released.status, 200)
    const second = post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY)
    await eventually(t, 'the key is taken anew: TI holds the second', () => ti.received() === 2)
    // The first is refused by TI's gateway: its own key is freed, not the second's.
    ti.answer(0, 429, '{"fault":"spike"}')
    t.equal((await first).status, 429)
    const third = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY)
    t.equal(codeOf(third), 'IDEMPOTENCY_KEY_IN_USE', 'the second is still in flight')
    t.equal(ti.received(), 2, 'TI did not get the order a third time')
    ti.answer(1, 201, '{"order":2}')
    t.equal((await second).status, 201)
    const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', KEY)
    t.equal(retry.headers['idempotent-replayed'], 'true', 'the second\'s answer is kept')
    t.equal(retry.body.toString(), '{"order":2}')
  })
}
