// Unfinished request heads are no request: admission never sees them, so what they may hold is
// bounded by configuration. 2,000 heads of 15.8 KB held 31 KiB each of private memory (36.5 →
// 97.5 MiB, 2026-12-02, Node 24.22.3; docs/overload.md): the model is twice the largest head
// plus 4 KiB, and a name and a value string for each field it may hold, beside an idle
// sidecar's 40 MiB. The bound on heads (headsBound) and the heads kept on memory (keptHeads)
// are derived from it, so every MAX_HEADER_BYTES and MAX_HEADER_COUNT the schema accepts fits;
// a setting where MAX_CONNECTIONS heads would not fit is still named at start.
import fc from 'fast-check'
import t from 'tap'
import { schema } from '../../src/config/schema.js'
import { headCost, headsBound, headsFit, HEADER_STRING_OVERHEAD_BYTES, HEADS_WATER, IDLE_PRIVATE_BYTES, KEPT_HEADS, KEPT_HEADS_BYTES, keptHeads } from '../../src/overload/waters.js'
import { startSidecar } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const WARNING = /^MAX_CONNECTIONS 2000 unfinished request heads of MAX_HEADER_BYTES 16384 and MAX_HEADER_COUNT 100 \(43328 bytes each\) and an idle sidecar \(41943040\) may not fit in the memory limit of (\d+) bytes: /
const { MAX_HEADER_BYTES, MAX_HEADER_COUNT } = schema.properties

t.test('the model: the defaults fit in the tested 128 MiB, not in 64 MiB; no limit or no bound always fits', async (t) => {
  t.equal(headCost(16_384, 100), 36 * 1024 + 101 * 2 * HEADER_STRING_OVERHEAD_BYTES, 'the bytes twice, 4 KiB, two strings for each of MAX_HEADER_COUNT + 1 fields')
  t.equal(headCost(1024, 2000), 2 * 1024 + 4 * 1024 + 256 * 2 * HEADER_STRING_OVERHEAD_BYTES, 'no more fields than the bytes allow')
  t.ok(headsFit(128 * MiB, 2000, 16_384, 100), `${(IDLE_PRIVATE_BYTES + 2000 * headCost(16_384, 100)) / MiB} MiB of 128`)
  t.notOk(headsFit(64 * MiB, 2000, 16_384, 100))
  t.ok(headsFit(64 * MiB, 500, 16_384, 100), 'fewer connections')
  t.ok(headsFit(0, 2000, 16_384, 100), 'no limit known')
  t.ok(headsFit(64 * MiB, 0, 16_384, 100), 'no connection bound')
  t.equal(headsBound(128 * MiB, headCost(16_384, 100)), 580, 'the default bound at 128 MiB')
  t.equal(keptHeads(headCost(16_384, 100)), KEPT_HEADS, 'all 64 kept at the default')
  t.equal(headsBound(0, headCost(16_384, 100)), 0, 'no limit, no bound')
})

/**
 * Shrunk by hand from the outside review's finding: MAX_HEADER_BYTES 1 MiB in 128 MiB. The
 * bound was floored at 64 heads and 64 were kept on memory: 64 heads of ~2 MiB each, beside an
 * admin-port flood, OOM-killed the sidecar.
 */
t.test('MAX_HEADER_BYTES 1 MiB in 128 MiB: the bound and the heads kept fit', async (t) => {
  const cost = headCost(1024 * 1024, 100)
  t.equal(headsBound(128 * MiB, cost), 11, 'what fits under HEADS_WATER beside an idle sidecar')
  t.equal(keptHeads(cost), 1)
  t.ok(IDLE_PRIVATE_BYTES + headsBound(128 * MiB, cost) * cost <= HEADS_WATER * 128 * MiB)
})

t.test('every accepted MAX_HEADER_BYTES and MAX_HEADER_COUNT: the bound\'s heads fit under HEADS_WATER beside an idle sidecar (or in KEPT_HEADS_BYTES), the kept ones in KEPT_HEADS_BYTES', async (t) => {
  const settings = fc.record({
    bytes: fc.integer({ min: MAX_HEADER_BYTES.minimum, max: MAX_HEADER_BYTES.maximum }),
    count: fc.integer({ min: MAX_HEADER_COUNT.minimum, max: MAX_HEADER_COUNT.maximum }),
    limit: fc.integer({ min: 64 * MiB, max: 8 * 1024 * MiB })
  })
  const edges: Array<[{ bytes: number, count: number, limit: number }]> = [
    [{ bytes: MAX_HEADER_BYTES.maximum, count: MAX_HEADER_COUNT.maximum, limit: 128 * MiB }],
    [{ bytes: MAX_HEADER_BYTES.maximum, count: MAX_HEADER_COUNT.minimum, limit: 64 * MiB }],
    [{ bytes: MAX_HEADER_BYTES.minimum, count: MAX_HEADER_COUNT.maximum, limit: 128 * MiB }]
  ]
  fc.assert(fc.property(settings, ({ bytes, count, limit }) => {
    const cost = headCost(bytes, count)
    const bound = headsBound(limit, cost)
    const kept = keptHeads(cost)
    return bound >= kept && kept >= 1 && kept * cost <= KEPT_HEADS_BYTES &&
      bound * cost <= Math.max(HEADS_WATER * limit - IDLE_PRIVATE_BYTES, KEPT_HEADS_BYTES)
  }), { examples: edges })
  t.pass('held for every setting tried')
})

t.test('at start: a warning naming the settings when the heads do not fit, none when they do', async (t) => {
  const upstream = await startUpstream(t)
  for (const [limit, warned] of [[64 * MiB, true], [128 * MiB, false]] as const) {
    const { logs } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(limit) })
    const lines = logs.entries().filter((e) => WARNING.test(String(e.msg)))
    t.same(lines.map((e) => ({ level: e.level, limit: Number(WARNING.exec(String(e.msg))?.[1]) })), warned ? [{ level: 40, limit }] : [], `${limit / MiB} MiB`)
  }
})
