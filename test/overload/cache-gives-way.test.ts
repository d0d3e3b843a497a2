// The read cache gives way before callers are shed: when live memory reaches the high water,
// the overload manager first asks what can give way (the cache's copies) for memory down to the
// low water, collects, and sheds only if that was not enough. On an injected memory reader
// and a fake clock. An outside review found a full cache kept the sidecar shedding every
// request while it held copies that a miss could fetch again.
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { ADMISSION_SAMPLE_MS, createOverloadManager, HIGH_WATER, LOW_WATER, SAMPLE_MS } from '../../src/overload/manager.js'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import { metricValue } from '../helpers/metrics.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const LIMIT = 100 * MiB

/** A process whose live memory is what it holds, the cache's copies, and garbage until a collection. */
function sidecar (t: Test, { cacheBytes = 30 * MiB, gives = true } = {}) {
  const { clock, tick } = fakeClock()
  const memory = { held: 20 * MiB, cache: cacheBytes, garbage: 0, collections: 0 }
  const asked: number[] = []
  const logs = captureLogs()
  const overload = createOverloadManager({
    limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' },
    maxInFlight: 0,
    clock,
    log: logs.log,
    metrics: createMetrics({ defaultMetrics: false }),
    readLiveBytes: () => memory.held + memory.cache + memory.garbage,
    readPrivateBytes: () => undefined,
    collect: () => {
      memory.collections += 1
      memory.garbage = 0
    },
    ...(gives
      ? {
          giveWay: (bytes: number) => {
            asked.push(bytes)
            const given = Math.min(Math.max(0, bytes), memory.cache)
            memory.cache -= given
            memory.garbage += given
            return given
          }
        }
      : {})
  })
  overload.start()
  t.teardown(overload.stop)
  return { overload, memory, asked, tick, logs }
}

t.test('at the high water the cache gives way down to the low water, and no request is shed', async (t) => {
  const { overload, memory, asked, tick, logs } = sidecar(t)
  t.equal(overload.admit(), undefined, 'below the high water: admitted')
  overload.leave()
  memory.held = 35 * MiB
  await tick(SAMPLE_MS)
  t.same(asked, [35 * MiB + 30 * MiB - LOW_WATER * LIMIT], 'asked for live memory down to the low water')
  t.equal(memory.collections, 1, 'what it gave back collected at once')
  t.equal(overload.status().state, 'normal')
  t.equal(overload.status().liveBytes, LOW_WATER * LIMIT, 'live memory read again after it')
  t.equal(overload.admit(), undefined, 'a request admitted')
  overload.leave()
  const said = logs.entries().map((l) => String(l.msg))
  t.match(said, [/the read cache gave way/])
  t.notOk(said.some((msg) => /overloaded/.test(msg)), 'no shedding said')
})

t.test('what the cache cannot give back is shed on as before', async (t) => {
  const { overload, memory, asked, tick } = sidecar(t, { cacheBytes: 5 * MiB })
  memory.held = 60 * MiB
  await tick(SAMPLE_MS)
  t.equal(asked.length, 1, 'asked once')
  t.equal(memory.cache, 0, 'all it held given back')
  t.equal(overload.status().memoryShedding, true, 'still over the high water: shedding')
  t.equal(overload.admit(), 'memory')
  await tick(5 * SAMPLE_MS)
  t.equal(asked.length, 1, 'not asked again while shedding')
})

t.test('an empty cache gives nothing: no collection of its own, shed as before', async (t) => {
  const { overload, memory, asked, tick } = sidecar(t, { cacheBytes: 0 })
  memory.held = HIGH_WATER * LIMIT
  await tick(SAMPLE_MS)
  t.equal(asked.length, 1)
  t.equal(overload.admit(), 'memory')
  t.equal(memory.collections, 1, 'only the collection shedding makes once a second')
})

t.test('without a cache, the manager sheds as it always did', async (t) => {
  const { overload, memory, tick } = sidecar(t, { gives: false })
  memory.held = 35 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), 'memory', '65 MiB of a 100 MiB limit: shed')
})

t.test('an admission that finds the high water crossed asks the cache too, before it is shed', async (t) => {
  const { overload, memory, asked, tick } = sidecar(t)
  memory.held = 45 * MiB
  await tick(ADMISSION_SAMPLE_MS)
  t.equal(asked.length, 0, 'no timed sample yet')
  t.equal(overload.admit(), undefined, 'admitted: the cache gave way at its sample')
  t.equal(asked.length, 1)
})

t.test('the built sidecar: at the high water its cache gives way, and the request is answered, not shed', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => { res.setHeader('content-type', 'application/json').end('{"part":1}') })
  // Live memory over the high water of a 64 MiB limit until a collection frees what the cache gave back.
  const live = { bytes: 20 * MiB }
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url, { RATE_LIMITS: 'GET /v2/** 1000/1s cache=1h', MEMORY_LIMIT_BYTES: String(64 * MiB) }, {
    memory: { readLiveBytes: () => live.bytes, readPrivateBytes: () => undefined, collectGarbage: () => { live.bytes = 20 * MiB } }
  })
  const get = async (path: string): Promise<number> => {
    const res = await request(proxyUrl + path)
    await res.body.dump()
    return res.statusCode
  }
  for (let i = 0; i < 20; i++) t.equal(await get(`/v2/parts/${i}`), 200)
  const held = await metricValue(adminUrl, 'store_auth_proxy_cache_bytes')
  t.ok(held > 0, `the cache holds ${held} bytes`)
  live.bytes = 40 * MiB
  await new Promise((resolve) => setTimeout(resolve, ADMISSION_SAMPLE_MS))
  t.equal(await get('/v2/parts/new'), 200, 'admitted')
  t.ok(await metricValue(adminUrl, 'store_auth_proxy_cache_bytes') < held, 'the cache gave some of its copies back')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 0, 'nothing shed')
})
