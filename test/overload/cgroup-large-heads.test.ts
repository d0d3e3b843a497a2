// The largest MAX_HEADER_BYTES the configuration accepts, 1 MiB, in the tested 128 MiB: slow
// heads growing towards it on many connections, then an admin-port flood. The bound on
// unfinished heads and the heads kept on memory are derived from MAX_HEADER_BYTES and
// MAX_HEADER_COUNT (waters.ts headCost, keptHeads): so few of them fit that the sidecar lives,
// every head answered (431, 503 or 408) or closed in time, /livez never failing for a liveness
// period. The built sidecar, run as the image runs it (test/helpers/cgroup-sidecar.ts).
//
// Needs root, a memory cgroup this process may make a child of, and room for the flood's
// sockets in this process's open-file limit; skipped, saying which is missing, elsewhere.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { driveSchedule, scheduleFailures, waveNote, type Wave } from '../../bench/lib/hostile-waves.js'
import { setUpCgroup, startInCgroup } from '../helpers/cgroup-sidecar.js'

const MAX_HEADER_BYTES = 1024 * 1024

/**
 * Shrunk by hand from the review's finding: heads growing by 100 KB a second from 600 KB, on 200
 * connections, then 8,060 unfinished admin heads. With the bound floored at 64 heads and 64 kept
 * on memory whatever their size, 64 heads of ~2 MiB each fill the group before the flood lands.
 */
const MEGABYTE_HEADS_THEN_ADMIN_FLOOD: Wave[] = [
  { kind: 'slow-bytes', size: 200, startMs: 0, startBytes: 600_000, pieceBytes: 100_000 },
  { kind: 'admin', size: 8060, startMs: 3000 }
]

function fewFiles (): string | false {
  const soft = Number(/^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1]?.replace('unlimited', 'Infinity') ?? NaN)
  return soft >= 10_000 ? false : `open-file limit ${soft}: the flood needs 10000`
}

const cgroup = setUpCgroup(fewFiles)
t.setTimeout(180_000)

t.test('MAX_HEADER_BYTES 1 MiB in 128 MiB: heads growing towards it, then an admin-port flood; the sidecar lives', { skip: typeof cgroup === 'string' ? cgroup : false }, async (t) => {
  if (typeof cgroup === 'string') return
  const sidecar = await startInCgroup(t, cgroup, { MAX_HEADER_BYTES: String(MAX_HEADER_BYTES) })
  if (sidecar === undefined) return
  cgroup.resetPeak()
  const outcome = await driveSchedule({ ...sidecar, tag: 'mib' }, MEGABYTE_HEADS_THEN_ADMIN_FLOOD)
  let peak = NaN
  try { peak = cgroup.peakBytes() } catch {}
  t.comment(`${outcome.ms} ms, peak ${(peak / 1024 / 1024).toFixed(1)} MiB, /livez worst ${outcome.livez.worstMs} ms\n  ${outcome.waves.map(waveNote).join('\n  ')}`)
  t.ok(sidecar.alive(), `alive (${cgroup.events()})`)
  t.same(scheduleFailures(outcome, sidecar.alive()), [], 'every head answered or closed in time, /livez never failing for a liveness period, a plain call answered 200 after')
})
