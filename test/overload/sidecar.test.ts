// A real sidecar over its memory high water (its live-memory reader injected) and at its
// in-flight cap: new requests get 503 OVERLOADED with Retry-After and a status line, nothing
// reaches the upstream, no budget is spent, and it recovers by itself.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startStalledUpstream, startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const LIMIT = 128 * MiB

async function readyz (adminUrl: string): Promise<{ status: number, reason: string }> {
  const res = await request(adminUrl + '/readyz')
  return { status: res.statusCode, reason: (await res.body.json() as { reason: string }).reason }
}

async function call (proxyUrl: string, path: string, body?: string) {
  const res = await request(proxyUrl + path, body === undefined ? {} : { method: 'POST', body, headers: { 'content-type': 'application/json' } })
  const text = await res.body.text()
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], text }
}

/** A sidecar with MEMORY_LIMIT_BYTES=128 MiB whose live memory the test sets, and a budget of 3 calls an hour. */
async function overloadedSidecar (t: Test) {
  const upstream = await startUpstream(t)
  const memory = { live: 20 * MiB, collections: 0 }
  const sidecar = await startSidecar(t, upstream.url, {
    MEMORY_LIMIT_BYTES: String(LIMIT), RATE_LIMITS: '* /v2/store/** 3/1h', RATE_LIMIT_MAX_WAIT_MS: '0', ACCESS_LOG: 'true'
  }, {
    memory: { readLiveBytes: () => memory.live, collectGarbage: () => { memory.collections += 1 } }
  })
  return { ...sidecar, upstream, memory }
}

t.test('over the high water: 503 OVERLOADED before anything is read or sent; below the low water: served again', async (t) => {
  const { proxyUrl, adminUrl, upstream, memory, logs } = await overloadedSidecar(t)
  t.equal((await call(proxyUrl, '/v2/store/a')).status, 200, 'normal at 20 MiB')
  t.equal(upstream.received.length, 1)

  memory.live = 100 * MiB
  await eventually(t, '/readyz says it sheds', async () => /overloaded: live memory 100 MiB and 0 MiB for bodies in flight over 60 % of the 128 MiB limit/.test((await readyz(adminUrl)).reason))
  t.equal((await readyz(adminUrl)).status, 200, 'still ready while shedding')
  for (const path of ['/v2/store/b', '/v2/store/c', '/v2/store/d', '/v2/store/e']) {
    const shed = await call(proxyUrl, path, JSON.stringify({ big: 'x'.repeat(60 * 1024) }))
    t.equal(shed.status, 503)
    t.equal(shed.retryAfter, '1')
    t.same(JSON.parse(shed.text), { error: 'OVERLOADED', message: 'the sidecar is overloaded; retry later' })
  }
  // A caller that sends its head and body in one go over a raw socket sees a status line too.
  const raw = await rawRequest(proxyUrl, 'POST /v2/store/f HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello')
  t.equal(statusOf(raw), 503)
  // The unread body is discarded and the connection kept: a second request on it is answered too.
  const body = 'x'.repeat(60 * 1024)
  const twice = await rawRequest(proxyUrl, `POST /v2/store/g HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
    'GET /v2/store/h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  t.equal(twice.match(/HTTP\/1\.1 503 /g)?.length, 2, 'two status lines on one connection')
  t.equal(upstream.received.length, 1, 'the upstream saw none of the shed requests')
  t.ok(memory.collections >= 1, 'a full collection asked to tell live memory from garbage')

  const status = await (await request(adminUrl + '/status')).body.json() as { overload: Record<string, unknown>, config: Record<string, unknown> }
  t.match(status.overload, { state: 'shedding', memoryShedding: true, limitBytes: LIMIT, limitSource: 'MEMORY_LIMIT_BYTES', liveBytes: 100 * MiB, maxInFlight: 500 })
  t.match(status.config, { MEMORY_LIMIT_BYTES: LIMIT, MAX_IN_FLIGHT_REQUESTS: 500 })
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shedding'), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 7)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'OVERLOADED' }), 7)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'POST', status_class: '5xx', outcome: 'completed' }), 6)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_memory_limit_bytes'), LIMIT)
  t.ok(logs.entries().some((e) => e.msg === 'request' && e.statusCode === 503), 'in the access log')

  memory.live = 80 * MiB
  t.equal((await call(proxyUrl, '/v2/store/g2')).status, 503, 'between the waters: still shedding')
  memory.live = 50 * MiB
  await eventually(t, 'shedding stops below the low water', async () => await metricValue(adminUrl, 'store_auth_proxy_overload_shedding') === 0)
  t.same((await readyz(adminUrl)).reason, 'token held')
  // The budget of 3 an hour: one spent before, none by the six shed requests, so two are left.
  t.same([(await call(proxyUrl, '/v2/store/h')).status, (await call(proxyUrl, '/v2/store/i')).status, (await call(proxyUrl, '/v2/store/j')).status],
    [200, 200, 429], 'the shed requests spent nothing from the budget')
  t.same(upstream.received.map((r) => r.url), ['/v2/store/a', '/v2/store/h', '/v2/store/i'])
  t.same(logs.entries().filter((e) => e.component === 'overload').map((e) => e.msg),
    ['overloaded: shedding new requests (503 OVERLOADED)', 'no longer overloaded: accepting new requests'])
})

t.test('the memory limit is logged once at start', async (t) => {
  const { logs } = await overloadedSidecar(t)
  const lines = logs.entries().filter((e) => typeof e.msg === 'string' && e.msg.startsWith('memory limit known'))
  t.equal(lines.length, 1)
  // Heads of 16 KiB and 100 fields (headCost 42.3 KiB) under half of 128 MiB beside an idle sidecar's 40 MiB.
  t.match(lines[0], { memoryLimitBytes: LIMIT, source: 'MEMORY_LIMIT_BYTES', maxInFlightRequests: 500, maxUnfinishedHeads: 580 })
})

t.test('the in-flight cap: with the cap held at the upstream the next caller gets 503; one answered, the next passes', async (t) => {
  const upstream = await startStalledUpstream(t)
  const cap = 3
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url, { MAX_IN_FLIGHT_REQUESTS: String(cap), MEMORY_LIMIT_BYTES: '0' })
  const held = Array.from({ length: cap }, async (_, i) => await request(proxyUrl + `/v2/store/held${i}`).then(async (r) => { await r.body.dump(); return r.statusCode }))
  await eventually(t, `${cap} requests held at the upstream`, () => upstream.received.length === cap)
  const over = await call(proxyUrl, '/v2/store/over')
  t.equal(over.status, 503)
  t.equal(over.retryAfter, '1')
  t.equal(JSON.parse(over.text).error, 'OVERLOADED')
  t.match((await readyz(adminUrl)).reason, /at the cap of 3 requests in flight/)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'in_flight' }), 1)

  upstream.release()
  t.same(await Promise.all(held), [200, 200, 200])
  const next = request(proxyUrl + '/v2/store/next').then(async (r) => { await r.body.dump(); return r.statusCode })
  await eventually(t, 'the next request reaches the upstream', () => upstream.received.length === cap + 1)
  t.equal(upstream.received.some((r) => r.url === '/v2/store/over'), false, 'the shed one was never sent')
  upstream.releaseAll()
  t.equal(await next, 200)
  const status = await (await request(adminUrl + '/status')).body.json() as { overload: Record<string, unknown> }
  t.match(status.overload, { state: 'normal', inFlight: 0, maxInFlight: cap, limitBytes: 0, limitSource: 'MEMORY_LIMIT_BYTES' })
})
