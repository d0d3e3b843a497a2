// A keyed order whose body is over KEYED_BODY_MAX_BYTES (64 KiB), MAX_BODY_BYTES at its default
// (0: no limit): the caller reads 413 BODY_TOO_LARGE. Found by an outside review: the stage
// destroyed the body stream, which is the caller's connection, and the caller got a reset.
import t from 'tap'
import { startSidecar } from '../helpers/build.js'
import { post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'
const RULES = `POST ${ORDERS} idempotency=24h require-key`

t.test('a keyed body of 70 KiB with Content-Length: the caller gets a 413, not a reset', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  const body = JSON.stringify({ a: 'x'.repeat(70 * 1024) })
  const res = await post(sidecar.proxyUrl, ORDERS, body, { 'idempotency-key': '"big"' }).then(
    (r) => ({ status: r.status, body: r.body.toString() }), (err: Error) => ({ status: 0, body: err.message }))
  t.equal(res.status, 413, `the caller reads 413 (got ${res.status}: ${res.body})`)
  t.equal(ti.orders.length, 0, 'nothing sent')
})

t.test('a keyed body of 70 KiB, chunked: the caller gets a 413, not a reset', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  const body = JSON.stringify({ a: 'x'.repeat(70 * 1024) })
  const { request } = await import('node:http')
  const res = await new Promise<{ status: number, body: string }>((resolve) => {
    const req = request(sidecar.proxyUrl + ORDERS, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': '"big2"' } }, (r) => {
      let b = ''
      r.on('data', (c: Buffer) => { b += c.toString() })
      r.on('end', () => { resolve({ status: r.statusCode ?? 0, body: b }) })
      r.on('error', (e) => { resolve({ status: 0, body: e.message }) })
    })
    req.on('error', (e) => { resolve({ status: 0, body: e.message }) })
    req.write(body.slice(0, 40000))
    req.write(body.slice(40000))
    req.end()
  })
  t.equal(res.status, 413, `the caller reads 413 (got ${res.status}: ${res.body})`)
  t.equal(ti.orders.length, 0, 'nothing sent')
})
