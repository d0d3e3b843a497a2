// A real sidecar whose private memory (RssAnon, injected) is near its limit: with one request in
// flight, the next that would not fit gets 503 OVERLOADED with a status line, nothing reaches
// the upstream for it and no budget is spent; a request with none in flight is always served,
// and the sidecar recovers by itself once a sample sees the memory fall.
import t from 'tap'
import { request } from 'undici'
import { PRIVATE_WATER, REQUEST_COST } from '../../src/overload.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startStalledUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const LIMIT = 128 * MiB

async function get (url: string): Promise<{ status: number, retryAfter: unknown, text: string }> {
  const res = await request(url)
  return { status: res.statusCode, retryAfter: res.headers['retry-after'], text: await res.body.text() }
}

t.test('private memory near the limit: what does not fit is shed before anything is sent; one at a time is always served', async (t) => {
  const upstream = await startStalledUpstream(t)
  // Just under the water: room for the first request's cost, not for a second one's.
  const memory = { private: Math.floor(PRIVATE_WATER * LIMIT) - REQUEST_COST - 1 }
  const { proxyUrl, adminUrl, logs } = await startSidecar(t, upstream.url, {
    MEMORY_LIMIT_BYTES: String(LIMIT), RATE_LIMITS: '* /v2/store/** 3/1h', RATE_LIMIT_MAX_WAIT_MS: '0'
  }, {
    // Live memory low (the test process's own is not the sidecar's): only private memory matters here.
    readLiveBytes: () => 20 * MiB,
    readPrivateBytes: () => memory.private,
    collectGarbage: () => {}
  })

  const first = get(proxyUrl + '/v2/store/first')
  await eventually(t, 'the first request held at the upstream', () => upstream.received.length === 1)
  const shed = await get(proxyUrl + '/v2/store/second')
  t.equal(shed.status, 503)
  t.equal(shed.retryAfter, '1')
  t.same(JSON.parse(shed.text), { error: 'OVERLOADED', message: 'the sidecar is overloaded; retry later' })
  t.equal(upstream.received.length, 1, 'the shed request was never sent')
  const ready = await (await request(adminUrl + '/readyz')).body.json() as { reason: string }
  t.match(ready.reason, /overloaded: private memory 102 MiB and 0 MiB expected of the requests in flight near 80 % of the 128 MiB limit/)
  const status = await (await request(adminUrl + '/status')).body.json() as { overload: Record<string, unknown> }
  t.match(status.overload, { state: 'shedding', memoryShedding: false, privateShedding: true, privateBytes: memory.private, privateWaterBytes: Math.round(PRIVATE_WATER * LIMIT), inFlight: 1, inFlightCostBytes: REQUEST_COST })
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shedding'), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_memory_private_bytes'), memory.private)

  upstream.release()
  t.equal((await first).status, 200)
  await eventually(t, 'the first answer closed', async () => await metricValue(adminUrl, 'store_auth_proxy_overload_shedding') === 1 &&
    ((await (await request(adminUrl + '/status')).body.json()) as { overload: { inFlight: number } }).overload.inFlight === 0)
  const alone = get(proxyUrl + '/v2/store/alone')
  await eventually(t, 'with none in flight, the next is sent', () => upstream.received.length === 2)
  upstream.release()
  t.equal((await alone).status, 200)

  memory.private = 40 * MiB
  await eventually(t, 'a sample sees the memory fall', async () => await metricValue(adminUrl, 'store_auth_proxy_overload_shedding') === 0)
  upstream.releaseAll()
  t.same([(await get(proxyUrl + '/v2/store/third')).status, (await get(proxyUrl + '/v2/store/fourth')).status], [200, 429],
    'the budget of 3: the shed request spent nothing')
  t.same(upstream.received.map((r) => r.url), ['/v2/store/first', '/v2/store/alone', '/v2/store/third'])
  t.same(logs.entries().filter((e) => e.component === 'overload').map((e) => e.msg), [
    'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)',
    'private memory no longer near the limit: accepting new requests'
  ])
})
