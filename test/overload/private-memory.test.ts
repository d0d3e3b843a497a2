// A real sidecar whose private memory (RssAnon, injected) is at its water: while 8 requests are
// in flight, the next gets 503 OVERLOADED with a status line, nothing reaches the upstream for
// it and no budget is spent; fewer than 8 in flight are always served, and the sidecar recovers
// by itself once a sample sees the memory fall.
import t from 'tap'
import { request } from 'undici'
import { PRIVATE_FLOOR_IN_FLIGHT, PRIVATE_WATER, REQUEST_COST } from '../../src/overload/manager.js'
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

async function overloadStatus (adminUrl: string): Promise<Record<string, unknown>> {
  return ((await (await request(adminUrl + '/status')).body.json()) as { overload: Record<string, unknown> }).overload
}

t.test('private memory at the water: beyond 8 in flight, what does not fit is shed before anything is sent; fewer are always served', async (t) => {
  const upstream = await startStalledUpstream(t)
  const memory = { private: Math.floor(PRIVATE_WATER * LIMIT) }
  const { proxyUrl, adminUrl, logs } = await startSidecar(t, upstream.url, {
    MEMORY_LIMIT_BYTES: String(LIMIT), RATE_LIMITS: '* /v2/store/** 10/1h', RATE_LIMIT_MAX_WAIT_MS: '0'
  }, {
    memory: {
      // Live memory low (the test process's own is not the sidecar's): only private memory matters here.
      readLiveBytes: () => 20 * MiB,
      readPrivateBytes: () => memory.private,
      collectGarbage: () => {}
    }
  })

  const held = Array.from({ length: PRIVATE_FLOOR_IN_FLIGHT }, async (_, i) => await get(proxyUrl + `/v2/store/held${i}`))
  await eventually(t, '8 requests held at the upstream, admitted though private memory is at the water', () => upstream.received.length === PRIVATE_FLOOR_IN_FLIGHT)
  const shed = await get(proxyUrl + '/v2/store/ninth')
  t.equal(shed.status, 503)
  t.equal(shed.retryAfter, '1')
  t.same(JSON.parse(shed.text), { error: 'OVERLOADED', message: 'the sidecar is overloaded; retry later' })
  t.equal(upstream.received.length, PRIVATE_FLOOR_IN_FLIGHT, 'the shed request was never sent')
  const ready = await (await request(adminUrl + '/readyz')).body.json() as { reason: string }
  t.match(ready.reason, /overloaded: private memory 102 MiB and 0 MiB expected of the requests in flight near 80 % of the 128 MiB limit/)
  t.match(await overloadStatus(adminUrl), {
    state: 'shedding',
    memoryShedding: false,
    privateShedding: true,
    privateBytes: memory.private,
    privateWaterBytes: Math.round(PRIVATE_WATER * LIMIT),
    inFlight: PRIVATE_FLOOR_IN_FLIGHT,
  })
  // Each request costs REQUEST_COST plus what its header fields cost (admission.ts headerCost).
  const { inFlightCostBytes } = await overloadStatus(adminUrl) as { inFlightCostBytes: number }
  t.ok(inFlightCostBytes > PRIVATE_FLOOR_IN_FLIGHT * REQUEST_COST && inFlightCostBytes < PRIVATE_FLOOR_IN_FLIGHT * (REQUEST_COST + 4096),
    `${inFlightCostBytes} bytes: ${PRIVATE_FLOOR_IN_FLIGHT} requests' constant and their few header fields`)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shedding'), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 1)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_memory_private_bytes'), memory.private)

  upstream.release()
  t.same((await Promise.all(held)).map((r) => r.status), Array(PRIVATE_FLOOR_IN_FLIGHT).fill(200))
  await eventually(t, 'their answers closed', async () => (await overloadStatus(adminUrl)).inFlight === 0)
  const alone = get(proxyUrl + '/v2/store/alone')
  await eventually(t, 'with fewer than 8 in flight, the next is sent, private memory unchanged', () => upstream.received.length === PRIVATE_FLOOR_IN_FLIGHT + 1)
  upstream.release()
  t.equal((await alone).status, 200)

  memory.private = 40 * MiB
  await eventually(t, 'a sample sees the memory fall', async () => await metricValue(adminUrl, 'store_auth_proxy_overload_shedding') === 0)
  upstream.releaseAll()
  t.same([(await get(proxyUrl + '/v2/store/tenth')).status, (await get(proxyUrl + '/v2/store/eleventh')).status], [200, 429],
    'the budget of 10: nine sent, the shed request spent nothing, the tenth passes')
  t.same(logs.entries().filter((e) => e.component === 'overload').map((e) => e.msg), [
    'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)',
    'private memory no longer near the limit: accepting new requests'
  ])
})

t.test('private memory is read from the system files the sidecar is given, as its memory limit is', async (t) => {
  const upstream = await startStalledUpstream(t)
  const files: Record<string, string> = { '/proc/self/status': 'Name:\tnode\nRssAnon:\t  102400 kB\n' }
  const { adminUrl } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(LIMIT) }, {
    memory: { readSystemFile: (path) => files[path], readLiveBytes: () => 20 * MiB, collectGarbage: () => {} }
  })
  t.match(await overloadStatus(adminUrl), { privateBytes: 100 * MiB, limitBytes: LIMIT })
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_memory_private_bytes'), 100 * MiB)
})
