// MAX_CONNECTIONS unfinished request heads are no request: admission never sees them, so they
// must fit in the memory limit by configuration. 2,000 heads of 15.8 KB held 31 KiB each of
// private memory (36.5 → 97.5 MiB, 2026-12-02, Node 24.22.3; docs/overload.md): the model is
// twice the largest head plus 4 KiB, beside an idle sidecar's 40 MiB. A setting where they do
// not fit is named at start.
import t from 'tap'
import { headCost, headsFit, IDLE_PRIVATE_BYTES } from '../../src/overload/waters.js'
import { startSidecar } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const WARNING = /^MAX_CONNECTIONS unfinished request heads of MAX_HEADER_BYTES may not fit/

t.test('the model: the defaults fit in the tested 128 MiB, not in 64 MiB; no limit or no bound always fits', async (t) => {
  t.equal(headCost(16_384), 36 * 1024)
  t.ok(headsFit(128 * MiB, 2000, 16_384), `${(IDLE_PRIVATE_BYTES + 2000 * headCost(16_384)) / MiB} MiB of 128`)
  t.notOk(headsFit(64 * MiB, 2000, 16_384))
  t.ok(headsFit(64 * MiB, 500, 16_384), 'fewer connections')
  t.ok(headsFit(0, 2000, 16_384), 'no limit known')
  t.ok(headsFit(64 * MiB, 0, 16_384), 'no connection bound')
})

t.test('at start: a warning naming the settings when the heads do not fit, none when they do', async (t) => {
  const upstream = await startUpstream(t)
  for (const [limit, warned] of [[64 * MiB, true], [128 * MiB, false]] as const) {
    const { logs } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(limit) })
    const lines = logs.entries().filter((e) => WARNING.test(String(e.msg)))
    t.same(lines.map((e) => ({ level: e.level, memoryLimitBytes: e.memoryLimitBytes, maxConnections: e.maxConnections, maxHeaderBytes: e.maxHeaderBytes })),
      warned ? [{ level: 40, memoryLimitBytes: limit, maxConnections: 2000, maxHeaderBytes: 16_384 }] : [], `${limit / MiB} MiB`)
  }
})
