// Seams between the idempotency stage and the rest of the request path: a keyed request whose
// caller left before TI's 401, Apigee's rate-limit 500, a chunked body over MAX_BODY_BYTES.
// Each frees the key where nothing was placed, and answers as any route would.
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http'
import { createConnection, type AddressInfo } from 'node:net'
import { gzipSync } from 'node:zlib'
import t, { type Test } from 'tap'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'
const RULES = `POST ${ORDERS} idempotency=24h require-key`

/** TI answering its n-th order (from 1) as `answer` says; every order's body read first. */
async function scriptedTi (t: Test, answer: (n: number, res: ServerResponse, req: IncomingMessage) => void) {
  let n = 0
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => { n += 1; answer(n, res, req) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received: () => n }
}

function json (res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json' })
  res.end(body)
}

async function keyCounts (adminUrl: string): Promise<Record<string, number>> {
  const status = await (await fetch(`${adminUrl}/status`)).json() as { idempotency: { keys: Record<string, number> } }
  return status.idempotency.keys
}

t.test('caller gone, then TI\'s 401: nothing more is sent and the key is free again', async (t) => {
  let rejected = false
  const ti = await scriptedTi(t, (n, res) => {
    if (n > 1) { json(res, 201, '{"order":"placed"}'); return }
    res.once('finish', () => { rejected = true })
    setTimeout(() => { json(res, 401, '{"fault":"invalid token"}') }, 400)
  })
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES })
  const headers = { 'idempotency-key': '"po-401"' }
  // The caller gives up before TI answers.
  await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers, { timeoutMs: 100 }).catch(() => undefined)
  await eventually(t, 'TI answered 401', () => rejected)
  await eventually(t, 'the key is released', async () => (await keyCounts(sidecar.adminUrl)).pending === 0, 3000)
  t.equal(ti.received(), 1, 'not replayed for a caller who left')
  const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers)
  t.equal(retry.status, 201, 'the retry is sent')
  t.equal(ti.received(), 2)
})

t.test('Apigee\'s rate-limit fault (a 500) frees the key, compressed or not; another 500 is kept', async (t) => {
  const fault = '{"fault":{"faultstring":"Spike arrest violation","detail":{"errorcode":"policies.ratelimit.SpikeArrestViolation"}}}'
  const seen = new Map<string, number>()
  const ti = await scriptedTi(t, (_n, res, req) => {
    const key = String(req.headers['idempotency-key'])
    const count = (seen.get(key) ?? 0) + 1
    seen.set(key, count)
    if (count > 1) json(res, 201, '{"order":"placed"}')
    else if (key === '"po-fault"') json(res, 500, fault)
    else if (key === '"po-gzip"') {
      res.writeHead(500, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
      res.end(gzipSync(fault))
    } else json(res, 500, '{"error":"order service failed"}')
  })
  // No cool-down: the retry goes at once (a fault's cool-down refuses it locally, unsent, meanwhile).
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES, RATE_LIMIT_COOLDOWN_MS: '0' })
  for (const key of ['"po-fault"', '"po-gzip"']) {
    const first = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': key })
    t.equal(first.status, 500, `${key}: the gateway's fault, as it came`)
    const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': key })
    t.equal(retry.status, 201, `${key}: the retry is sent`)
    t.equal(retry.headers['idempotent-replayed'], undefined, `${key}: not a replay`)
    t.equal(seen.get(key), 2)
  }
  // TI's own 500 may have placed the order: kept and replayed.
  t.equal((await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"po-500"' })).status, 500)
  const replayed = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"po-500"' })
  t.equal(replayed.status, 500)
  t.equal(replayed.headers['idempotent-replayed'], 'true')
  t.equal(seen.get('"po-500"'), 1)
})

/** A POST whose body is sent chunked (no Content-Length), part by part. */
async function chunked (url: string, path: string, parts: string[], headers: Record<string, string>): Promise<{ status: number, body: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body }) })
    })
    req.on('error', reject)
    for (const p of parts) req.write(p)
    req.end()
  })
}

t.test('a chunked body over MAX_BODY_BYTES on a keyed route: 413 as on any route, its key not held', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: `${RULES}; POST /v2/plain 100/1h`, MAX_BODY_BYTES: '1000' })
  const big = ['{"a":"', 'x'.repeat(1500), '"}']
  const plain = await chunked(sidecar.proxyUrl, '/v2/plain', big, {})
  const keyed = await chunked(sidecar.proxyUrl, ORDERS, big, { 'idempotency-key': '"k1"' })
  t.equal(plain.status, 413)
  t.equal(keyed.status, 413, 'the same 413')
  t.same(JSON.parse(keyed.body), JSON.parse(plain.body), 'the same body: BODY_TOO_LARGE')
  t.same(sidecar.logs.entries().filter((l) => Number(l.level) >= 50), [], 'no ERROR line')
  t.equal(ti.orders.length, 0, 'nothing sent')
  t.equal((await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"k1"' })).status, 201, 'the key is free')
})

t.test('a caller that aborts a keyed upload: no ERROR, nothing sent, its key not held', async (t) => {
  const ti = await startTi(t)
  const sidecar = await startSidecar(t, ti.url, { RATE_LIMITS: RULES, MAX_BODY_BYTES: '100000' })
  const socket = createConnection(Number(new URL(sidecar.proxyUrl).port), '127.0.0.1')
  socket.on('error', () => {})
  socket.write(`POST ${ORDERS} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nidempotency-key: "k2"\r\n` +
    'transfer-encoding: chunked\r\n\r\n5\r\n{"a":\r\n')
  await eventually(t, 'the sidecar has the request in flight', async () => await metricValue(sidecar.adminUrl, 'store_auth_proxy_requests_in_flight') === 1)
  socket.resetAndDestroy()
  await eventually(t, 'the stage saw the abort', () => sidecar.logs.entries().some((l) =>
    /idempotency stage failed|before its keyed request was read/.test(String(l.msg))))
  t.same(sidecar.logs.entries().filter((l) => Number(l.level) >= 50), [], 'no ERROR line')
  t.equal(ti.orders.length, 0, 'nothing sent')
  const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', { 'idempotency-key': '"k2"' })
  t.equal(retry.status, 201, 'the key is free')
})
