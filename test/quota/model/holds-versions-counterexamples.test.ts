// Version-mixing schedules that broke the quota guarantee, replayed by holds-versions.test.ts's
// runner (version-mix-run.ts: the same doubles, the same check after every step and tick): the
// two an outside review found beside the earlier version's scripts, as the model writes them
// (attacks/holds-stale-mark.test.ts and attacks/holds-earlier-release.test.ts, step by step).
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { startRedis } from '../../helpers/redis.js'
import { runMix } from './version-mix-run.js'
import type { Mix } from './version-mix-schedule.js'

t.setTimeout(60_000)
t.jobs = 2

/** `todo`: the schedule runs and is checked, its failure reported but not counted (an open finding). */
async function holds (t: Test, mix: Mix, { todo }: { todo?: string } = {}): Promise<void> {
  const server = await startRedis(t)
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  const report = await runMix(server.url, admin, mix, 'cx:')
  t.equal(report.violation, undefined, report.violation ?? 'the guarantee held', { trace: report.trace.join('\n'), ...(todo === undefined ? {} : { todo }) })
}

t.test('m0, ended by time, back on the earlier version, cut off again: its new lapse is held', async (t) => {
  // m0 declares 4 (m1 present, of 2, cannot release it): time ends it. Back on the earlier
  // version its entry is kept as m0#time, released once m2 and m3 join; cut off again, it
  // spends alone without end.
  await holds(t, {
    size: 2,
    floors: [4, 2, 2, 2],
    versions: ['current', 'current', 'current', 'current'],
    steps: [
      { op: 'cut', m: 0 }, { op: 'wait', ms: 2_000 },
      { op: 'restart', m: 0, version: 'earlier', vouches: false },
      { op: 'restart', m: 2, version: 'current', vouches: false },
      { op: 'restart', m: 3, version: 'current', vouches: false },
      { op: 'cut', m: 0 }, { op: 'wait', ms: 2_000 },
      { op: 'burst', m: 1 }, { op: 'wait', ms: 300 }, { op: 'burst', m: 1 }
    ]
  })
})

t.test('the earlier version releases by age: the live m2, not m3 ended by time', async (t) => {
  // m2 (earlier, declaring 4) cut off spends alone without end; m3 (this version, 4) dies and
  // ends by time; m4 joins on the earlier version, whose release takes the oldest lapsed: m2.
  await holds(t, {
    size: 3,
    floors: [2, 2, 4, 4, 2],
    versions: ['current', 'current', 'earlier', 'current', 'earlier'],
    steps: [
      { op: 'cut', m: 2 }, { op: 'wait', ms: 600 },
      { op: 'restart', m: 3, version: 'current', vouches: false }, { op: 'crash', m: 3 }, { op: 'wait', ms: 2_500 },
      { op: 'restart', m: 4, version: 'earlier', vouches: false }, { op: 'wait', ms: 1_600 },
      { op: 'burst', m: 0 }, { op: 'wait', ms: 300 }, { op: 'burst', m: 0 }
    ]
  })
})

t.test('a rollout raising the size, cut off in turn: the old pods spend alone by their own size', async (t) => {
  // Found by holds-versions.test.ts (seed 1, before mayCut kept it out): m0, m1, m3 declare 3,
  // m2 declares 4 (the largest: 4 may run). m1 is cut off first; the others' next scripts count
  // 3 present, so m0 and m3 take ⌊12/3⌋ = 4 as their share; then they are cut off too:
  // 3 + 4 + 3 + 4 = 14 alone in one window. The share is the sidecar's (fleet-alone.ts), the
  // same on this version; here its alone bound (1 s) ends m1's spending before the others
  // start (that takes two TTLs and a W), a production bound (1 h + W) would not. An open
  // finding: a share by the largest size on record (Redis tells it) would keep it within N.
  await holds(t, {
    size: 3,
    floors: [3, 3, 4, 3, 3],
    versions: ['earlier', 'earlier', 'earlier', 'earlier', 'earlier'],
    steps: [
      { op: 'restart', m: 3, version: 'earlier', vouches: false }, { op: 'wait', ms: 300 },
      { op: 'cut', m: 1 }, { op: 'wait', ms: 700 },
      { op: 'cut', m: 0 }, { op: 'cut', m: 2 }, { op: 'cut', m: 3 }, { op: 'wait', ms: 1_200 }
    ],
    cutSmaller: true
  }, { todo: 'an open finding: a share alone by the own size, not the largest on record' })
})
