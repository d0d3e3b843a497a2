// Where the features meet, case 3, embedded mode: with STATE_DIR the ledger outlives a restart, so a
// crash-looping sidecar never gets a fresh budget; a missing file is a first start, a corrupt
// one is the worst case (every budget held as spent for one window, said in the log).
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { startStandIn } from '../helpers/build.js'
import { startRecordingUpstream, type RecordingUpstream } from '../helpers/recording-upstream.js'
import { tempDir } from '../helpers/temp-dir.js'
import { DAY, quotaSidecar } from '../quota/sidecar.js'

const CATALOG = '/v2/store/products/catalog'
const RULES = `GET ${CATALOG} 1/4h 6/1d; GET /v2/store/** 3/6s`

/** One run of the sidecar on this state directory (each with a fake clock at the same wall time: a restart within the same second). */
async function run (t: Test, dir: string, upstream: RecordingUpstream, authUrl: string) {
  return await quotaSidecar(t, { RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0', STATE_DIR: dir }, { upstream, authUrl })
}

t.test('the embedded crash loop: every restart finds the catalog call of the first run, none gets a fresh budget', async (t) => {
  const dir = tempDir('sap-state-')
  const upstream = await startRecordingUpstream(t)
  const { url } = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const first = await run(t, dir, upstream, url)
  t.equal((await first.call(CATALOG, 'run0')).status, 200)
  t.match(first.logs.entries().find((e) => /STATE_DIR/.test(String(e.msg))), { level: 30, restored: 0, msg: /first start here/ })
  const stored = JSON.parse(readFileSync(join(dir, 'quota', 'ledger.json'), 'utf8')) as { version: number, member: string, sends: Array<{ scope: string, limit: string }> }
  t.match(stored, { version: 1, member: /^[0-9a-f-]{13}$/ })
  t.same(stored.sends.map((s) => `${s.scope} ${s.limit}`).sort(), [`GET ${CATALOG} 1/4h`, `GET ${CATALOG} 6/1d`], 'written before the send went out')
  // A crash: the process is gone, nothing of it closes cleanly (the file was written before the send).
  for (let i = 1; i <= 3; i++) {
    const again = await run(t, dir, upstream, url)
    const seen = await again.call(CATALOG, `run${i}`)
    t.equal(seen.status, 429, `restart ${i}: the budget is still spent`)
    t.equal(seen.headers['retry-after'], String(4 * 3600), 'for the rest of its window')
    t.match(again.logs.entries().find((e) => /STATE_DIR/.test(String(e.msg))), { restored: 2 + i - 1, msg: 'rate-limit ledger restored from STATE_DIR' }, 'the catalog\'s two limits, and the other calls before')
    t.equal((await again.call('/v2/store/products/other', `other${i}`)).status, 200, 'other rules are not held')
  }
  t.same(upstream.received.filter((r) => r.url === CATALOG).length, 1, 'TI saw one catalog call in four runs')
})

t.test('a corrupt ledger is the worst case: every budget held as spent for one window, said once', async (t) => {
  const upstream = await startRecordingUpstream(t)
  const { url } = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const cases: Array<[string, string]> = [['not JSON', '{"version":1,"mem'], ['another format', '{"version":2,"member":"x","sends":[]}'], ['a send without a time', '{"version":1,"member":"x","sends":[{"scope":"a","limit":"1/1s","id":"x"}]}']]
  for (const [name, content] of cases) {
    const dir = tempDir('sap-state-')
    mkdirSync(join(dir, 'quota'))
    writeFileSync(join(dir, 'quota', 'ledger.json'), content)
    const s = await run(t, dir, upstream, url)
    const warned = s.logs.entries().filter((e) => /unusable/.test(String(e.msg)))
    t.match(warned, [{ level: 40, held: 1 + 6 + 3, reason: name === 'not JSON' ? 'not JSON' : 'not a format 1 ledger' }], name)
    t.equal((await s.call(CATALOG, `c-${name}`)).status, 429, `${name}: the catalog held`)
    const other = await s.call('/v2/store/x', `x-${name}`)
    t.equal(other.status, 429, `${name}: every rule held`)
    t.equal(other.headers['retry-after'], '6', 'for its window')
    await s.clock.tick(6_000)
    t.equal((await s.call('/v2/store/x', `y-${name}`)).status, 200, 'then free')
  }
  t.equal(upstream.received.filter((r) => r.url === CATALOG).length, 0)
})

t.test('sends outside their window are forgotten; a rule no longer configured is dropped', async (t) => {
  const dir = tempDir('sap-state-')
  mkdirSync(join(dir, 'quota'))
  const wall = 1_700_000_000_000
  writeFileSync(join(dir, 'quota', 'ledger.json'), JSON.stringify({
    version: 1,
    member: 'm',
    sends: [
      { scope: `GET ${CATALOG}`, limit: '1/4h', id: 'old', at: wall - 4 * 3_600_000 },
      { scope: `GET ${CATALOG}`, limit: '6/1d', id: 'old', at: wall - 4 * 3_600_000 },
      { scope: 'GET /gone', limit: '1/1d', id: 'gone', at: wall },
      { scope: 'GET /v2/store/**', limit: '3/6s', id: 'future', at: wall + 60_000 }
    ]
  }))
  const upstream = await startRecordingUpstream(t)
  const s = await quotaSidecar(t, { RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0', STATE_DIR: dir }, { upstream })
  t.match(s.logs.entries().find((e) => /STATE_DIR/.test(String(e.msg))), { restored: 3 })
  t.equal((await s.call(CATALOG, 'c')).status, 200, 'the catalog call 4 h ago has left its 1/4h window')
  for (let i = 0; i < 2; i++) t.equal((await s.call('/v2/store/x', `x${i}`)).status, 200)
  const third = await s.call('/v2/store/x', 'x2')
  t.equal(third.status, 429, 'a send dated in the future (a wall clock stepped back) counts from now')
  t.equal(third.headers['retry-after'], '6')
})

t.test('a STATE_DIR that cannot be written: said once, sends go on', async (t) => {
  const dir = tempDir('sap-state-')
  writeFileSync(join(dir, 'quota'), 'a file where the directory should be')
  const upstream = await startRecordingUpstream(t)
  const s = await quotaSidecar(t, { RATE_LIMITS: RULES, RATE_LIMIT_MAX_WAIT_MS: '0', STATE_DIR: dir }, { upstream })
  t.match(s.logs.entries().find((e) => /STATE_DIR/.test(String(e.msg))), { level: 40, reason: 'unreadable (ENOTDIR)' }, 'unreadable is corrupt: held for a window')
  await s.clock.tick(6_000)
  t.equal((await s.call('/v2/store/a', 'a')).status, 200)
  t.equal((await s.call('/v2/store/b', 'b')).status, 200)
  const errors = s.logs.entries().filter((e) => /cannot be written/.test(String(e.msg)))
  t.match(errors, [{ level: 50, reason: 'ENOTDIR' }], 'said once')
})
