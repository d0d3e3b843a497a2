// The overload manager's decisions on an injected memory reader and a fake clock: thresholds,
// hysteresis, no livelock after a burst, the in-flight cap, and what it says while shedding.
import { constants, performance, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { ADMISSION_SAMPLE_MS, BODY_COST, COLLECT_GAP_MS, COUNTED_BODY_MAX_BYTES, createOverloadManager, DISCARD_COLLECT_BYTES, fullCollection, liveBytes, PRIVATE_CLEAR, PRIVATE_FLOOR_IN_FLIGHT, PRIVATE_HOLD_MS, PRIVATE_WATER, REQUEST_COST, SAMPLE_MS, shouldShed, youngCollection } from '../../src/overload/manager.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import type { Registry } from 'prom-client'

const MiB = 1024 * 1024

/** One sample of the registry: the series with these labels, 0 if absent. */
async function readMetric (registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const { values } = await registry.getSingleMetric(name)!.get()
  return values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value ?? 0
}
const LIMIT = 100 * MiB

/** How long after a full collection the memory outside the heap it freed is still counted (measured: under 100 ms). */
const RELEASE_MS = 100

/**
 * A heap as V8 keeps it: objects the program still holds, and garbage that stays counted until
 * a full collection; the memory outside the heap that a collection frees goes a moment later.
 */
function modelHeap (now: () => number) {
  const heap = { held: 10 * MiB, garbage: 0, collections: 0, freeing: 0, collectedAt: -Infinity }
  return {
    heap,
    read: () => heap.held + heap.garbage + (now() - heap.collectedAt < RELEASE_MS ? heap.freeing : 0),
    collect: () => {
      heap.collections += 1
      heap.collectedAt = now()
      heap.freeing = heap.garbage
      heap.garbage = 0
    }
  }
}

function manager (t: Test, { maxInFlight = 0, maxConnections = 0, limitBytes = LIMIT } = {}) {
  const { clock, tick } = fakeClock()
  const model = modelHeap(clock.now)
  /** The cgroup's usage counter: undefined when unknown; reads counted. */
  const cgroup: { usage: number | undefined, reads: number } = { usage: undefined, reads: 0 }
  /** The process's private memory (RssAnon): undefined when unknown. */
  const rss: { private: number | undefined } = { private: undefined }
  /** Young collections asked. */
  const young = { collections: 0 }
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  const overload = createOverloadManager({
    limit: { bytes: limitBytes, source: 'MEMORY_LIMIT_BYTES' },
    maxInFlight,
    maxConnections,
    clock,
    log: logs.log,
    metrics,
    readLiveBytes: model.read,
    readUsageBytes: () => { cgroup.reads += 1; return cgroup.usage },
    readPrivateBytes: () => rss.private,
    collect: model.collect,
    collectYoung: () => { young.collections += 1 }
  })
  overload.start()
  t.teardown(overload.stop)
  return { overload, model, cgroup, rss, young, tick, logs, metrics, clock }
}

t.test('shouldShed: from the high water up, until below the low water; never without a limit', async (t) => {
  const cases: Array<[boolean, number, boolean]> = [
    [false, 59.9, false], [false, 60, true], [false, 90, true],
    [true, 60, true], [true, 45, true], [true, 44.9, false]
  ]
  for (const [shedding, live, expected] of cases) t.equal(shouldShed(shedding, live * MiB, LIMIT), expected, `shedding=${shedding} live=${live} MiB`)
  t.equal(shouldShed(false, 1e12, 0), false)
})

t.test('shouldShed: from the usage water up too, but only with live memory over the low water', async (t) => {
  // [shedding, live, usage, expected]
  const cases: Array<[boolean, number, number | undefined, boolean]> = [
    [false, 50, 69.9, false], [false, 50, 70, true], [false, 45, 99, true], [false, 44.9, 99, false],
    [false, 59, undefined, false], [true, 44.9, 99, false], [true, 45, 0, true]
  ]
  for (const [shedding, live, usage, expected] of cases) {
    t.equal(shouldShed(shedding, live * MiB, LIMIT, () => usage === undefined ? undefined : usage * MiB), expected, `shedding=${shedding} live=${live} usage=${usage} MiB`)
  }
  let reads = 0
  const counted = (): number => { reads += 1; return 99 * MiB }
  shouldShed(false, 30 * MiB, LIMIT, counted)
  shouldShed(false, 70 * MiB, LIMIT, counted)
  shouldShed(true, 50 * MiB, LIMIT, counted)
  t.equal(reads, 0, 'usage not read below the low water, over the high water, nor while shedding')
})

t.test('live memory is heap used plus external, which already holds the ArrayBuffers', async (t) => {
  t.equal(liveBytes({ heapUsed: 30, external: 12 }), 42)
  t.ok(liveBytes() > 0, 'from process.memoryUsage()')
})

t.test('the real full collection frees what was dropped, and leaves the main context\'s globals alone', async (t) => {
  const collect = fullCollection()
  let dropped: Array<{ i: number, s: string }> | undefined = Array.from({ length: 300_000 }, (_, i) => ({ i, s: `object ${i}` }))
  collect()
  const held = process.memoryUsage().heapUsed
  t.equal(dropped.length, 300_000)
  dropped = undefined
  collect()
  t.ok(held - process.memoryUsage().heapUsed > 10 * MiB, 'the dropped objects are gone from heapUsed')
  t.equal('gc' in globalThis, false)
})

t.test('over the high water new requests are shed; back below the low water they pass again', async (t) => {
  const { overload, model, tick, logs, metrics } = manager(t)
  t.equal(overload.admit(), undefined, 'normal at 10 MiB')
  overload.leave()
  model.heap.held = 80 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), 'memory')
  t.equal(overload.status().state, 'shedding')
  t.match(overload.readinessNote(), /live memory 80 MiB and 0 MiB for bodies in flight over 60 % of the 100 MiB limit/)
  model.heap.held = 50 * MiB
  await tick(SAMPLE_MS * 4)
  t.equal(overload.admit(), 'memory', 'between the waters it still sheds (hysteresis)')
  model.heap.held = 44 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), undefined, 'below the low water: admitted')
  overload.leave()
  t.equal(overload.readinessNote(), undefined)
  model.heap.held = 55 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), undefined, 'between the waters from below: still admitted')
  overload.leave()
  t.same(logs.entries().map((e) => e.msg), ['overloaded: shedding new requests (503 OVERLOADED)', 'no longer overloaded: accepting new requests'])
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 2)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shedding'), 0)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_memory_live_bytes'), 55 * MiB)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_memory_limit_bytes'), LIMIT)
})

t.test('a burst is seen by the next request, not a whole sample period later', async (t) => {
  const { overload, model, tick } = manager(t)
  model.heap.held = 90 * MiB
  await tick(ADMISSION_SAMPLE_MS - 1)
  t.equal(overload.admit(), undefined, 'sampled too recently to sample again')
  await tick(1)
  t.equal(overload.admit(), 'memory', 'sampled by the request itself')
})

t.test('no livelock after a burst: its garbage is collected and shedding stops by itself', async (t) => {
  const { overload, model, tick } = manager(t)
  // The burst's objects are dropped but still counted: only a full collection tells.
  model.heap.garbage = 80 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), 'memory', 'shed on the first sample over the high water')
  t.equal(model.heap.collections, 1, 'and a collection asked at once')
  await tick(RELEASE_MS - 1)
  t.equal(overload.admit(), 'memory', 'until the memory the collection freed is released')
  await tick(SAMPLE_MS - RELEASE_MS + 1)
  t.equal(overload.admit(), undefined, 'the next sample sees live memory only: accepting again')
  overload.leave()
  t.equal(model.heap.collections, 1)
})

t.test('the cgroup\'s usage: over its water with live memory over the low water it sheds; usage that stays high after a burst never keeps it shedding', async (t) => {
  const { overload, model, cgroup, tick, logs } = manager(t)
  // Memory live memory cannot see (native allocations, V8's committed pages) fills the group.
  cgroup.usage = 75 * MiB
  model.heap.held = 40 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), undefined, 'live memory under the low water: usage alone does not shed')
  overload.leave()
  t.equal(cgroup.reads, 0, 'and is not even read')
  model.heap.held = 50 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), 'memory', 'live memory between the waters, usage over its water: shed')
  t.match(logs.entries()[0], { msg: 'overloaded: shedding new requests (503 OVERLOADED)', water: 'cgroup usage', usageBytes: 75 * MiB })
  t.match(overload.status(), { state: 'shedding', memoryShedding: true, usageBytes: 75 * MiB, usageWaterBytes: 70 * MiB })
  // The burst is over: live memory falls, the group's usage does not (freed memory kept).
  cgroup.usage = 95 * MiB
  model.heap.held = 30 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), undefined, 'live memory below the low water: accepting again, whatever the usage')
  overload.leave()
  for (let i = 0; i < 40; i++) {
    await tick(SAMPLE_MS)
    t.equal(overload.admit(), undefined)
    overload.leave()
  }
  t.match(overload.status(), { state: 'normal', memoryShedding: false })
  t.equal(logs.entries().length, 2, 'one start, one stop')
})

t.test('the usage is read at most once a sample, and only when it can matter', async (t) => {
  const { overload, model, cgroup, tick } = manager(t)
  cgroup.usage = 10 * MiB
  model.heap.held = 50 * MiB
  await tick(SAMPLE_MS)
  const after = cgroup.reads
  t.equal(after, 1, 'live memory between the waters: read on the sample')
  for (let i = 0; i < 100; i++) { overload.admit(); overload.leave() }
  t.equal(cgroup.reads, after, 'not again before the next sample')
  await tick(SAMPLE_MS)
  t.equal(cgroup.reads, after + 1)
  model.heap.held = 70 * MiB
  await tick(SAMPLE_MS)
  t.equal(cgroup.reads, after + 1, 'over the high water: not needed')
})

t.test('bodies in flight: heads admitted at low memory count for the bodies they announce, until their answers close', async (t) => {
  const { overload, model, cgroup, tick } = manager(t, { limitBytes: 10 * MiB })
  model.heap.held = 2 * MiB
  await tick(SAMPLE_MS)
  const body = 60 * 1024
  t.equal(BODY_COST, 2)
  // 2 MiB live + BODY_COST × 60 KiB a head: the high water (6 MiB) is crossed at the 35th head.
  for (let i = 0; i < 34; i++) t.equal(overload.admit(body), undefined)
  t.equal(overload.status().inFlightBodyBytes, 34 * 120 * 1024)
  t.equal(overload.admit(body), undefined, '5.98 MiB counted: admitted')
  t.equal(overload.admit(body), 'memory', 'at once, within the same sample: 6.1 MiB counted')
  t.match(overload.readinessNote(), /live memory 2 MiB and 4 MiB for bodies in flight over 60 %/)
  for (let i = 0; i < 35; i++) overload.leave(body)
  t.equal(overload.status().inFlightBodyBytes, 0)
  t.equal(overload.admit(), undefined, 'their answers closed: accepting again, without a new sample')
  overload.leave()
  // With the cgroup's usage (5 MiB): counted on it too. Shed once live + bodies is over the low
  // water (4.5 MiB) with usage + bodies over its water (7 MiB): after 22 heads, 2 + 2.58 MiB.
  cgroup.usage = 5 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < 22; i++) t.equal(overload.admit(body), undefined)
  t.equal(overload.admit(body), 'memory')
  t.match(overload.status(), { memoryShedding: true, usageBytes: 5 * MiB })
  for (let i = 0; i < 22; i++) overload.leave(body)
  t.equal(overload.admit(), undefined, 'the bodies gone, live memory under the low water: accepting again, usage unchanged')
  overload.leave()
})

t.test('private memory: a request is admitted only while private memory, the costs in flight and its own fit under the water', async (t) => {
  const { overload, rss, tick, logs, metrics } = manager(t)
  t.equal(PRIVATE_WATER, 0.8)
  t.equal(REQUEST_COST, 32 * 1024)
  // 79 MiB private: the water (80 MiB) leaves 1 MiB, room for 32 requests of 32 KiB.
  rss.private = 79 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < 32; i++) t.equal(overload.admit(), undefined, `request ${i + 1} fits`)
  t.equal(overload.status().inFlightCostBytes, 32 * REQUEST_COST)
  t.equal(overload.admit(), 'memory', 'the 33rd does not')
  t.match(overload.status(), { state: 'shedding', memoryShedding: false, privateShedding: true, privateBytes: 79 * MiB, privateWaterBytes: 80 * MiB })
  t.match(overload.readinessNote(), /private memory 79 MiB and 1 MiB expected of the requests in flight near 80 % of the 100 MiB limit/)
  t.match(logs.entries(), [{ msg: 'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)', privateBytes: 79 * MiB, inFlightCostBytes: MiB, privateWaterBytes: 80 * MiB }])
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shedding'), 1)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_memory_private_bytes'), 79 * MiB)
  overload.leave()
  t.equal(overload.admit(), undefined, 'one answer closed: the next fits, without a new sample')
  // A body counts as well: 32 KiB + BODY_COST × 60 KiB does not fit in the 32 KiB one answer leaves.
  overload.leave()
  t.equal(overload.admit(60 * 1024), 'memory')
  for (let i = 0; i < 5; i++) overload.leave()
  t.equal(overload.admit(60 * 1024), undefined, '152 KiB fits in the 160 KiB five answers leave')
  t.equal(overload.status().inFlightCostBytes, 27 * REQUEST_COST + BODY_COST * 60 * 1024)
  t.equal(logs.entries().length, 1, 'logged once while it lasts')
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shed_total', { reason: 'memory' }), 2)
})

t.test('private memory: the pressure ends when a sample finds the sum 5 % of the limit under the water', async (t) => {
  const { overload, rss, tick, logs, metrics } = manager(t)
  t.equal(PRIVATE_CLEAR, 0.05)
  t.equal(PRIVATE_FLOOR_IN_FLIGHT, 8)
  rss.private = 80 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < PRIVATE_FLOOR_IN_FLIGHT; i++) t.equal(overload.admit(), undefined, `fewer than 8 in flight: request ${i + 1} admitted whatever the sum`)
  t.equal(overload.admit(), 'memory', 'the 9th is not')
  // 8 in flight cost 256 KiB: clear once private memory is that much under 75 MiB.
  rss.private = 75 * MiB - 8 * REQUEST_COST + 1
  await tick(SAMPLE_MS)
  t.equal(overload.status().privateShedding, true, 'one byte short of 5 % under the water')
  rss.private = 75 * MiB - 8 * REQUEST_COST
  await tick(SAMPLE_MS)
  t.match(overload.status(), { state: 'normal', privateShedding: false })
  t.equal(overload.readinessNote(), undefined)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shedding'), 0)
  t.same(logs.entries().map((e) => e.msg), [
    'overloaded: private memory near the limit, shedding new requests that do not fit (503 OVERLOADED)',
    'private memory no longer near the limit: accepting new requests'
  ])
  for (let i = 0; i < PRIVATE_FLOOR_IN_FLIGHT; i++) overload.leave()
})

t.test('private memory: the pressure also ends after PRIVATE_HOLD_MS without a request shed on it, memory still high', async (t) => {
  const { overload, rss, tick, logs, metrics } = manager(t)
  t.equal(PRIVATE_HOLD_MS, 5000)
  rss.private = 78 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < PRIVATE_FLOOR_IN_FLIGHT; i++) overload.admit()
  t.equal(overload.admit(), undefined, '78 MiB + 9 × 32 KiB fits under 80 MiB')
  rss.private = 80 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), 'memory')
  for (let i = 0; i < 9; i++) overload.leave()
  rss.private = 79 * MiB
  await tick(PRIVATE_HOLD_MS - SAMPLE_MS)
  t.equal(overload.status().privateShedding, true, 'under 5 s since the last shed request')
  await tick(SAMPLE_MS)
  t.match(overload.status(), { state: 'normal', privateShedding: false }, 'memory between the water and 5 % under it, nothing shed for 5 s: no longer shedding')
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shedding'), 0)
  t.equal(logs.entries().length, 2)
})

t.test('private memory that stays over the water after a burst never stops the sidecar: 8 requests at a time are served', async (t) => {
  const { overload, model, rss, tick } = manager(t)
  rss.private = 120 * MiB
  for (let round = 0; round < 20; round++) {
    await tick(SAMPLE_MS)
    for (let i = 0; i < PRIVATE_FLOOR_IN_FLIGHT; i++) t.equal(overload.admit(), undefined, 'fewer than 8 in flight: admitted')
    t.equal(overload.admit(), 'memory', 'a 9th at once: shed')
    for (let i = 0; i < PRIVATE_FLOOR_IN_FLIGHT; i++) overload.leave()
  }
  t.equal(model.heap.collections, Math.floor((20 * SAMPLE_MS) / COLLECT_GAP_MS), 'a full collection at most once per COLLECT_GAP_MS while it sheds, to give back what V8 can')
  const whileShedding = model.heap.collections
  await tick(COLLECT_GAP_MS * 5)
  t.equal(model.heap.collections, whileShedding + 1, 'at rest, still over the water: one more for the last shed request, then none')
  rss.private = 10 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < 100; i++) t.equal(overload.admit(), undefined)
  for (let i = 0; i < 100; i++) overload.leave()
  const collections = model.heap.collections
  await tick(COLLECT_GAP_MS * 3)
  t.equal(model.heap.collections, collections, 'no collection once it is over')
})

t.test('private memory unknown (not Linux), or no limit: never shed on it', async (t) => {
  const unknown = manager(t)
  await unknown.tick(SAMPLE_MS)
  for (let i = 0; i < 5000; i++) t.equal(unknown.overload.admit(), undefined)
  t.match(unknown.overload.status(), { privateBytes: null, privateShedding: false })
  t.equal(await readMetric(unknown.metrics.registry, 'store_auth_proxy_memory_private_bytes'), 0)
  const unlimited = manager(t, { limitBytes: 0 })
  unlimited.rss.private = 1e12
  await unlimited.tick(SAMPLE_MS)
  for (let i = 0; i < 5000; i++) t.equal(unlimited.overload.admit(), undefined)
  t.match(unlimited.overload.status(), { privateBytes: 1e12, privateShedding: false }, 'still shown, read when asked')
})

t.test('the bodies of shed requests: a young collection every DISCARD_COLLECT_BYTES read and dropped, limit or none', async (t) => {
  t.equal(DISCARD_COLLECT_BYTES, 8 * MiB)
  for (const limitBytes of [LIMIT, 0]) {
    const { overload, young } = manager(t, { limitBytes })
    const chunk = 64 * 1024
    for (let i = 0; i < DISCARD_COLLECT_BYTES / chunk - 1; i++) overload.discarded(chunk)
    t.equal(young.collections, 0, `limit ${limitBytes}: not before 8 MiB`)
    overload.discarded(chunk)
    t.equal(young.collections, 1, 'at 8 MiB')
    overload.discarded(DISCARD_COLLECT_BYTES - 1)
    t.equal(young.collections, 1, 'counted afresh from there')
    overload.discarded(2)
    t.equal(young.collections, 2, 'at 8 MiB again')
    overload.discarded(DISCARD_COLLECT_BYTES - 1)
    t.equal(young.collections, 3, 'the byte over the last 8 MiB counts toward the next')
  }
})

t.test('the real young collection: a scavenge starts within the call, and the ArrayBuffers that died young are freed', async (t) => {
  const collect = youngCollection()
  const scavenges: number[] = []
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries() as Array<PerformanceEntry & { detail?: { kind?: number } }>) if (entry.detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) scavenges.push(entry.startTime)
  })
  observer.observe({ entryTypes: ['gc'] })
  t.teardown(() => { observer.disconnect() })
  const before = process.memoryUsage().arrayBuffers
  let dropped: Buffer[] | undefined = Array.from({ length: 64 }, () => Buffer.alloc(64 * 1024, 1))
  t.ok(process.memoryUsage().arrayBuffers - before >= 4 * MiB, '4 MiB of Buffers held')
  t.equal(dropped.length, 64)
  dropped = undefined
  const calledAt = performance.now()
  collect()
  const returnedAt = performance.now()
  // GC entries are delivered after the fact; V8 frees dead backing stores on a helper thread.
  const until = performance.now() + 2000
  while ((!scavenges.some((at) => at >= calledAt && at <= returnedAt) || process.memoryUsage().arrayBuffers - before >= MiB) && performance.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  t.ok(scavenges.some((at) => at >= calledAt && at <= returnedAt), 'a scavenge started while the call ran (one of its own, not one V8 chose later)')
  t.ok(process.memoryUsage().arrayBuffers - before < MiB, 'the Buffers are gone')
  t.equal('gc' in globalThis, false)
})

t.test('a body is counted up to COUNTED_BODY_MAX_BYTES: a longer one is streamed, and a huge announced length sheds nobody else', async (t) => {
  const { overload } = manager(t)
  t.equal(overload.admit(2 ** 40), undefined)
  t.equal(overload.status().inFlightBodyBytes, BODY_COST * COUNTED_BODY_MAX_BYTES)
  t.equal(overload.admit(), undefined)
  overload.leave()
  overload.leave(2 ** 40)
  t.equal(overload.status().inFlightBodyBytes, 0)
})

t.test('memory held by live objects keeps it shedding, collections at most once a second, until released', async (t) => {
  const { overload, model, tick } = manager(t)
  model.heap.held = 85 * MiB
  await tick(SAMPLE_MS)
  for (let i = 0; i < 8; i++) {
    await tick(SAMPLE_MS)
    t.equal(overload.admit(), 'memory')
  }
  t.equal(model.heap.collections, Math.floor((9 * SAMPLE_MS) / COLLECT_GAP_MS) + 1, 'one per COLLECT_GAP_MS')
  model.heap.held = 20 * MiB
  await tick(SAMPLE_MS)
  t.equal(overload.admit(), undefined)
  overload.leave()
  const before = model.heap.collections
  await tick(COLLECT_GAP_MS * 5)
  t.equal(model.heap.collections, before, 'no collection while not shedding')
})

t.test('the in-flight cap: the next request is shed, and passes once one answer closed', async (t) => {
  const { overload, metrics } = manager(t, { maxInFlight: 3 })
  for (let i = 0; i < 3; i++) t.equal(overload.admit(), undefined)
  t.equal(overload.admit(), 'in_flight')
  t.equal(overload.status().state, 'shedding')
  t.match(overload.readinessNote(), /at the cap of 3 requests in flight/)
  overload.leave()
  t.equal(overload.status().inFlight, 2)
  t.equal(overload.admit(), undefined, 'one closed: the next passes')
  t.equal(overload.admit(), 'in_flight')
  for (let i = 0; i < 3; i++) overload.leave()
  t.same(overload.status(), {
    state: 'normal',
    memoryShedding: false,
    privateShedding: false,
    limitBytes: LIMIT,
    limitSource: 'MEMORY_LIMIT_BYTES',
    limitFile: null,
    liveBytes: 10 * MiB,
    highWaterBytes: 60 * MiB,
    lowWaterBytes: 45 * MiB,
    usageBytes: null,
    usageWaterBytes: 70 * MiB,
    privateBytes: null,
    privateWaterBytes: 80 * MiB,
    inFlightCostBytes: 0,
    inFlight: 0,
    inFlightBodyBytes: 0,
    maxInFlight: 3,
    connections: 0,
    maxConnections: 0
  })
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shed_total', { reason: 'in_flight' }), 2)
})

t.test('the connection bound: the next connection is refused, and passes once one closed; requests are not counted', async (t) => {
  const { overload, metrics } = manager(t, { maxConnections: 2, maxInFlight: 1 })
  t.equal(overload.connect(), undefined)
  t.equal(overload.connect(), undefined)
  t.equal(overload.connect(), 'connections')
  t.match(overload.status(), { state: 'shedding', connections: 2, maxConnections: 2 })
  t.match(overload.readinessNote(), /at the bound of 2 open connections, new connections get 503 OVERLOADED and are closed/)
  t.equal(overload.admit(), undefined, 'a request on an open connection is admitted')
  overload.leave()
  overload.disconnect()
  t.equal(overload.connect(), undefined, 'one closed: the next passes')
  t.equal(overload.connect(), 'connections')
  overload.disconnect()
  overload.disconnect()
  t.match(overload.status(), { state: 'normal', connections: 0 })
  t.equal(overload.readinessNote(), undefined)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shed_total', { reason: 'connections' }), 2)
  t.equal(await readMetric(metrics.registry, 'store_auth_proxy_overload_shed_total', { reason: 'in_flight' }), 0)
})

t.test('0 means off: no memory watch without a limit, no cap with MAX_IN_FLIGHT_REQUESTS=0, no bound with MAX_CONNECTIONS=0', async (t) => {
  const { overload, model, tick } = manager(t, { limitBytes: 0 })
  model.heap.held = 1e12
  await tick(SAMPLE_MS * 4)
  for (let i = 0; i < 5000; i++) t.equal(overload.admit(), undefined)
  for (let i = 0; i < 5000; i++) t.equal(overload.connect(), undefined, 'no bound with MAX_CONNECTIONS=0')
  t.equal(model.heap.collections, 0)
  t.equal(overload.status().liveBytes, 1e12, 'live memory still shown, read when asked')
})

t.test('the sampling timer stops with the manager, and a second start arms no second one', async (t) => {
  const { clock, tick } = fakeClock()
  let reads = 0
  const overload = createOverloadManager({
    limit: { bytes: LIMIT, source: 'cgroup v1' },
    maxInFlight: 0,
    clock,
    log: captureLogs().log,
    metrics: createMetrics({ defaultMetrics: false }),
    readLiveBytes: () => { reads += 1; return 0 },
    collect: () => {}
  })
  overload.start()
  overload.start()
  await tick(SAMPLE_MS * 4)
  t.equal(reads, 5, 'one sample at start, one per period')
  overload.stop()
  await tick(SAMPLE_MS * 4)
  t.equal(reads, 5)
})
