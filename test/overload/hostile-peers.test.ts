// Nothing on the pod network can take the sidecar down: fast-check generates schedules of
// hostile peers (bench/lib/hostile-waves.ts), a few waves at once, each from its own offset:
// slow unfinished heads (growing by bytes, or by tiny header lines), whole requests of ~900
// header fields, idle keep-alives, unfinished heads on the admin port, and uploads with and
// without `Expect: 100-continue`, within MAX_BODY_BYTES or over it, slow or not; at sizes up to
// the floods' (cgroup-floods.test.ts, cgroup-loads.test.ts), so together they pass
// MAX_CONNECTIONS. All against ONE built sidecar, run as the image runs it inside a 128 MiB
// memory cgroup (test/helpers/cgroup-sidecar.ts), restarted only when it died (a failure).
// After each schedule: /livez (a new connection every 100 ms, from a process of its own) never
// failing for a liveness period, as in the floods; every connection that sent a whole head got
// a final status line (a 1xx is not one); every unfinished head answered (408/431/503) or
// closed within the listener's header timeout plus slack; only the statuses each kind is owed;
// nothing upstream that should not get there (431 and 413 never do); a plain call answered 200
// afterwards, and alive after every schedule (a todo until the heads behind an exchange and
// the chunked trailers were bounded too, 2026-12-02). Each schedule's cgroup peak and worst
// /livez latency are printed.
//
// 2026-12-02, 2 shared vCPUs, Node 24.22.3, `nice -n 10 tap <this file>`, other sessions' tests
// running (load 6–12). At rest, 3 runs: 51, 50, 77 s; peaks per schedule 68.9–114.9 MiB,
// /livez worst per schedule 32–1423 ms, never failing 1.1 s; GROWING_HEADS_THEN_ADMIN_FLOOD
// OOM-killed (128.0 MiB) in each, /livez worst 484–634 ms. With both cores busy (two
// `for(;;)` loops of this session, two of another; the sidecar at nice 10 under them): 265 and
// 251 s, the third slower still; peaks 89–127 MiB, /livez worst over 5 s, failing up to 59 s
// in a row: the liveness promise broke in each (a starved sidecar, not one OOM-killed).
// Since unfinished heads are closed past CONNECTION_WATER (same day, at rest, 10 runs): 43–57 s,
// peaks per schedule 90–128 MiB, /livez worst 1.8 s; GROWING_HEADS_THEN_ADMIN_FLOOD alive in 8
// (116.1–126.2 MiB), OOM-killed in 2: each of its floods alone peaks ~102 MiB and leaves private
// memory at 80–95 MiB, so together they still come near the limit; a generated schedule (9,135
// admin heads, 1,806 slow-lines heads) OOM-killed it in 1, after five others. Since heads are
// bounded in number (headsBound) and admin refusals stop lingering (same day, load 10–20 from
// other sessions, 3 runs): 80–90 s, GROWING_HEADS_THEN_ADMIN_FLOOD alive, 107.8–124.6 MiB,
// /livez worst 1.4–2.3 s; generated schedules 85.9–109.9 MiB, /livez worst 1.5 s.
//
// Needs root, a memory cgroup this process may make a child of, and room for MAX_SOCKETS
// sockets in this process's open-file limit; skipped, saying which is missing, elsewhere.
import { readFileSync } from 'node:fs'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { driveSchedule, HOSTILE_MAX_BODY_BYTES, scheduleFailures, waveNote, type Wave } from '../../bench/lib/hostile-waves.js'
import { checkProperty } from '../generative/harness.js'
import { setUpCgroup, startInCgroup, type CgroupSidecar } from '../helpers/cgroup-sidecar.js'
import { eventually } from '../helpers/eventually.js'

/** A schedule's connections at most, all open at once: this process holds their sockets. */
const MAX_SOCKETS = 14_000
const SCHEDULES = 5

/** Why this process cannot hold a schedule's sockets, or false. */
function fewFiles (): string | false {
  const soft = Number(/^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1]?.replace('unlimited', 'Infinity') ?? NaN)
  const need = MAX_SOCKETS + 1000
  return soft >= need ? false : `open-file limit ${soft}: a schedule needs ${need}`
}

const startMs = fc.integer({ min: 0, max: 3000 })
/** Sizes up to the floods': (e) 12,000 admin heads, (d) 3,000 slowloris, (f) 2,000 heavy heads, (b) 1,000 POSTs. */
const wave: fc.Arbitrary<Wave> = fc.oneof(
  fc.record({ kind: fc.constant('slow-bytes' as const), size: fc.integer({ min: 1, max: 3000 }), startMs, startBytes: fc.integer({ min: 0, max: 15_000 }), pieceBytes: fc.integer({ min: 1, max: 2000 }) }),
  fc.record({ kind: fc.constant('slow-lines' as const), size: fc.integer({ min: 1, max: 2000 }), startMs, startLines: fc.integer({ min: 0, max: 99 }), linesPerTick: fc.integer({ min: 1, max: 40 }) }),
  fc.record({ kind: fc.constant('heavy' as const), size: fc.integer({ min: 1, max: 2000 }), startMs, fields: fc.integer({ min: 850, max: 930 }) }),
  fc.record({ kind: fc.constant('idle' as const), size: fc.integer({ min: 1, max: 2000 }), startMs, holdMs: fc.integer({ min: 1000, max: 12_000 }) }),
  fc.record({ kind: fc.constant('admin' as const), size: fc.integer({ min: 1, max: 12_000 }), startMs }),
  fc.record({ kind: fc.constant('upload' as const), size: fc.integer({ min: 1, max: 1000 }), startMs, expect: fc.boolean(), over: fc.boolean(), slow: fc.boolean() })
)

/** Scaled down, each wave alike, to MAX_SOCKETS in all. */
function withinSockets (waves: Wave[]): Wave[] {
  const total = waves.reduce((sum, w) => sum + w.size, 0)
  if (total <= MAX_SOCKETS) return waves
  return waves.map((w) => ({ ...w, size: Math.max(1, Math.floor(w.size * MAX_SOCKETS / total)) }))
}
const schedules = fc.array(wave, { minLength: 2, maxLength: 5 }).map(withinSockets)

/**
 * Whether the sidecar still lives. An OOM kill shows in alive() only once its exit was read,
 * so /livez has the last word; a sidecar that does not answer is waited for to exit (its
 * successor shares the group's memory).
 */
async function living (t: Test, sidecar: CgroupSidecar): Promise<boolean> {
  try {
    if (sidecar.alive() && (await fetch(`http://127.0.0.1:${sidecar.adminPort}/livez`, { signal: AbortSignal.timeout(5000) })).ok) return true
  } catch {}
  if (!await eventually(t, 'the sidecar that stopped answering exited', () => !sidecar.alive(), 10_000)) throw new Error('the sidecar neither answers /livez nor exits')
  return false
}

const cgroup = setUpCgroup(fewFiles)
t.setTimeout(480_000)

/**
 * Found by this test (2026-12-02, shrunk by hand from its first failure): slow heads growing by
 * a header value's bytes towards MAX_HEADER_BYTES on every proxy slot (Node copies a growing
 * value whole at each read), then an admin-port flood. It OOM-killed the sidecar in every run
 * until unfinished heads were bounded in number by the memory limit (headsBound, oldest closed
 * first) and the admin listener closed a flood's excess at once instead of lingering on each
 * (closing heads on private memory alone, past CONNECTION_WATER, still lost 4 runs in 24).
 * Since then alive in every run, peaks 101–125 MiB (2026-12-02, load 10–20): its death fails.
 */
const GROWING_HEADS_THEN_ADMIN_FLOOD: Wave[] = [
  { kind: 'admin', size: 8060, startMs: 2613 },
  { kind: 'upload', size: 19, startMs: 1453, expect: true, over: false, slow: true },
  { kind: 'slow-bytes', size: 2008, startMs: 1669, startBytes: 11_432, pieceBytes: 1347 },
  { kind: 'slow-bytes', size: 628, startMs: 1773, startBytes: 4174, pieceBytes: 474 }
]

/**
 * Open for generated schedules: before the admin listener's cheaper refusal, one run in 10
 * ended in an OOM kill in a generated one after five others (memory kept from earlier floods).
 * Such a death is reported, not failed (every other promise is).
 */
t.test('the built sidecar in a 128 MiB memory cgroup holds every schedule of hostile peers on both listeners', { skip: typeof cgroup === 'string' ? cgroup : false }, async (t) => {
  if (typeof cgroup === 'string') return
  const env = { MAX_BODY_BYTES: String(HOSTILE_MAX_BODY_BYTES) }
  let sidecar: CgroupSidecar | undefined = await startInCgroup(t, cgroup, env)
  if (sidecar === undefined) return
  let runs = 0
  const deaths: string[] = []
  /** What failed of the promise after `schedule` (a death aside: it goes to `deaths`), or nothing; its figures as a comment. */
  const run = async (schedule: Wave[]): Promise<string[]> => {
    // Only after a schedule broke it: the next one meets a sidecar again.
    if (sidecar === undefined || !await living(t, sidecar)) sidecar = await startInCgroup(t, cgroup, env)
    if (sidecar === undefined) return ['the sidecar did not start again']
    const { port, adminPort, upstream } = sidecar
    cgroup.resetPeak()
    const outcome = await driveSchedule({ port, adminPort, upstream, tag: String(++runs) }, schedule)
    let peak = NaN
    try { peak = cgroup.peakBytes() } catch {}
    const note = `schedule ${runs}: ${outcome.ms} ms, peak ${(peak / 1024 / 1024).toFixed(1)} MiB, /livez worst ${outcome.livez.worstMs} ms ` +
      `(${outcome.livez.ok} / ${outcome.livez.polls} within 2 s, longest failing ${outcome.livez.longestFailingMs} ms)\n  ${outcome.waves.map(waveNote).join('\n  ')}`
    t.comment(note)
    if (!await living(t, sidecar)) {
      deaths.push(`${note}\n  (${cgroup.events()})`)
      return []
    }
    return scheduleFailures(outcome, true)
  }
  // Its /livez too fails for longer than a liveness period when the cores are starved (2026-12-02).
  t.same([...await run(GROWING_HEADS_THEN_ADMIN_FLOOD), ...deaths.splice(0)], [], 'slow heads growing to MAX_HEADER_BYTES on every slot, then an admin-port flood')
  const property = fc.asyncProperty(schedules, async (schedule) => {
    const failures = await run(schedule)
    if (failures.length > 0) throw new Error(failures.join('\n'))
  })
  await checkProperty(t, 'every schedule: /livez never failing for a liveness period, every whole head a final status, every unfinished one answered or closed in time, nothing upstream that should not be', property, { numRuns: SCHEDULES, timeLimitMs: 75_000 })
  t.same(deaths, [], 'no schedule killed the sidecar')
})
