// The overload manager forces a full collection while it sheds, so that it sheds on what is
// alive. Such a collection stops the event loop, /livez included, for as long as it takes, and a
// CPU-starved sidecar takes far longer: paced once per COLLECT_GAP_MS of wall time alone, a
// collection that takes most of a second took the whole of the sidecar's share while it shed.
// They are paced by their own length too: never more than COLLECT_SHARE of the time, their
// length taken as CPU time (a starved process's or a paused VM's waits are no collecting), the
// gap never over PRIVATE_HOLD_MS. The collections' length is made with the fake clock: each
// one blocks the loop as long as asked, and uses as much CPU time as asked.
import t, { type Test } from 'tap'
import { COLLECT_GAP_MS, COLLECT_SHARE, collectGap, createOverloadManager, PRIVATE_HOLD_MS, SAMPLE_MS } from '../../src/overload/manager.js'
import { createMetrics } from '../../src/metrics.js'
import type { Clock } from '../../src/clock.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

const MiB = 1024 * 1024
const LIMIT = 128 * MiB

/** A started manager on `clock` over these readings of live memory and CPU time, and this collection. */
function started (t: Test, clock: Clock, readings: { live: () => number, cpu: () => number }, collect: () => void) {
  const overload = createOverloadManager({
    limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' },
    maxInFlight: 0,
    clock,
    log: captureLogs().log,
    metrics: createMetrics({ defaultMetrics: false }),
    readLiveBytes: readings.live,
    readPrivateBytes: () => undefined,
    readCpuMs: readings.cpu,
    collect
  })
  overload.start()
  t.teardown(overload.stop)
  return overload
}

/** A manager shedding on live memory for good, whose forced collections each take `collectMs`, `cpuMs` of it on the CPU. */
function shedding (t: Test, collectMs: number, cpuMs = collectMs) {
  const { clock, tick, block } = fakeClock()
  const collections: number[] = []
  let cpu = 0
  const overload = started(t, clock, { live: () => 100 * MiB, cpu: () => cpu }, () => {
    collections.push(clock.now())
    cpu += cpuMs
    block(collectMs)()
  })
  return { overload, tick, collections }
}

t.test('a collection of 10 ms: one per COLLECT_GAP_MS while shedding, as before', async (t) => {
  const { overload, tick, collections } = shedding(t, 10)
  await tick(10 * COLLECT_GAP_MS)
  t.equal(overload.status().memoryShedding, true)
  t.ok(collections.length >= 9 && collections.length <= 11, `${collections.length} in 10 s`)
})

t.test('collections of 500 ms on the CPU: never more than COLLECT_SHARE of the time', async (t) => {
  const collectMs = 500
  const { tick, collections } = shedding(t, collectMs)
  const spanMs = 40_000
  await tick(spanMs)
  const gaps = collections.slice(1).map((at, i) => at - (collections[i] ?? 0))
  t.ok(collections.length >= 3, `still collecting (${collections.length} in ${spanMs / 1000} s)`)
  t.ok(collections.length * collectMs <= COLLECT_SHARE * spanMs + collectMs, `${collections.length} of ${collectMs} ms in ${spanMs / 1000} s: ${collections.length * collectMs} ms collecting`)
  for (const gap of gaps) t.ok(gap >= collectMs / COLLECT_SHARE, `${gap} ms from one start to the next`)
  t.ok(gaps.every((gap) => gap <= collectMs / COLLECT_SHARE + SAMPLE_MS), 'and no longer than the next sample after that')
})

t.test('the gap: 9 times the collection\'s CPU time or its wall time, the shorter, from COLLECT_GAP_MS to PRIVATE_HOLD_MS', async (t) => {
  const cases: Array<[wallMs: number, cpuMs: number, gapMs: number]> = [
    [10, 10, COLLECT_GAP_MS],
    [300, 300, 2700],
    [2000, 50, COLLECT_GAP_MS], // starved: the waits are not collecting
    [5050, 40, COLLECT_GAP_MS], // a VM paused 5 s during it
    [200, 600, 1800], // V8's helper threads: more CPU than the loop stopped
    [3000, 3000, PRIVATE_HOLD_MS],
    [10, -5, COLLECT_GAP_MS] // a CPU reading that went back
  ]
  for (const [wallMs, cpuMs, gapMs] of cases) t.equal(collectGap(wallMs, cpuMs), gapMs, `${wallMs} ms, ${cpuMs} ms on the CPU`)
})

t.test('a collection starved to 2 s, then the burst is garbage: shed little over COLLECT_GAP_MS more', async (t) => {
  // One collection starved (2 s of wall time, 50 ms of CPU) frees nothing: the burst is still
  // alive. The burst then ends, and only the next forced collection frees it; paced on wall
  // time, new requests were refused 18 s (9 times 2 s).
  const { clock, tick, block } = fakeClock()
  let live = 110 * MiB
  let burstOver = false
  let cpu = 0
  let collections = 0
  const overload = started(t, clock, { live: () => live, cpu: () => cpu }, () => {
    collections += 1
    cpu += 50
    if (collections === 1) block(2000)()
    else if (burstOver) live = 30 * MiB
  })
  await tick(SAMPLE_MS)
  t.equal(collections, 1, 'the starved collection ran')
  burstOver = true
  const endedAt = clock.now()
  while (overload.admit() !== undefined && clock.now() - endedAt < 60_000) await tick(100)
  const shedMs = clock.now() - endedAt
  t.ok(shedMs <= COLLECT_GAP_MS + 2 * SAMPLE_MS, `new requests shed ${shedMs} ms after the burst was garbage`)
})

t.test('a collection of 3 s on the CPU: the next one still within PRIVATE_HOLD_MS', async (t) => {
  const { tick, collections } = shedding(t, 3000)
  await tick(30_000)
  const gaps = collections.slice(1).map((at, i) => at - (collections[i] ?? 0))
  t.ok(gaps.length >= 2, `${collections.length} collections in 30 s`)
  t.ok(gaps.every((gap) => gap <= 3000 + PRIVATE_HOLD_MS + SAMPLE_MS), `gaps ${gaps.join(', ')} ms`)
})
