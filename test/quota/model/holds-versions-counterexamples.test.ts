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

async function holds (t: Test, mix: Mix): Promise<void> {
  const server = await startRedis(t)
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  const report = await runMix(server.url, admin, mix, 'cx:')
  t.equal(report.violation, undefined, report.violation ?? 'the guarantee held', { trace: report.trace.join('\n') })
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
