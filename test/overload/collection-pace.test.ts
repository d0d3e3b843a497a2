// The overload manager forces a full collection while it sheds, so that it sheds on what is
// alive. Such a collection stops the event loop, /livez included, for as long as it takes, and a
// CPU-starved sidecar takes far longer: paced once per COLLECT_GAP_MS of wall time alone, a
// collection that takes most of a second took the whole of the sidecar's share while it shed.
// They are paced by their own length too: never more than COLLECT_SHARE of the time. The
// collections' length is made with the fake clock: each one blocks the loop as long as asked.
import t, { type Test } from 'tap'
import { COLLECT_GAP_MS, COLLECT_SHARE, createOverloadManager, SAMPLE_MS } from '../../src/overload/manager.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

const MiB = 1024 * 1024
const LIMIT = 128 * MiB

/** A manager shedding on live memory for good, whose forced collections each take `collectMs`. */
function shedding (t: Test, collectMs: number) {
  const { clock, tick, block } = fakeClock()
  const collections: number[] = []
  const overload = createOverloadManager({
    limit: { bytes: LIMIT, source: 'MEMORY_LIMIT_BYTES' },
    maxInFlight: 0,
    clock,
    log: captureLogs().log,
    metrics: createMetrics({ defaultMetrics: false }),
    readLiveBytes: () => 100 * MiB,
    readPrivateBytes: () => undefined,
    collect: () => {
      collections.push(clock.now())
      block(collectMs)()
    }
  })
  overload.start()
  t.teardown(overload.stop)
  return { overload, tick, collections }
}

t.test('a collection of 10 ms: one per COLLECT_GAP_MS while shedding, as before', async (t) => {
  const { overload, tick, collections } = shedding(t, 10)
  await tick(10 * COLLECT_GAP_MS)
  t.equal(overload.status().memoryShedding, true)
  t.ok(collections.length >= 9 && collections.length <= 11, `${collections.length} in 10 s`)
})

t.test('a starved sidecar\'s collection of 800 ms: never more than COLLECT_SHARE of the time', async (t) => {
  const collectMs = 800
  const { tick, collections } = shedding(t, collectMs)
  const spanMs = 40_000
  await tick(spanMs)
  const gaps = collections.slice(1).map((at, i) => at - (collections[i] ?? 0))
  t.ok(collections.length >= 3, `still collecting (${collections.length} in ${spanMs / 1000} s)`)
  t.ok(collections.length * collectMs <= COLLECT_SHARE * spanMs + collectMs, `${collections.length} of ${collectMs} ms in ${spanMs / 1000} s: ${collections.length * collectMs} ms collecting`)
  for (const gap of gaps) t.ok(gap >= collectMs / COLLECT_SHARE, `${gap} ms from one start to the next`)
  t.ok(gaps.every((gap) => gap <= collectMs / COLLECT_SHARE + SAMPLE_MS), 'and no longer than the next sample after that')
})
