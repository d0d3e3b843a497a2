// A restart vouches only for a file this version wrote: the earlier version's run sent on when
// a write of its file failed (a full or read-only disk), so its file, read whole, may lack sends
// it made alone, and ending its lapse in Redis on that word frees their places early (once 3 in
// 3900 ms under 2/4s). Its sends still count; its lapse is held as any other.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { createLedger } from '../../src/quota/ledger.js'
import { createLedgerWriter, LEDGER_PATH, readLedgerFile, restoreLedger, vouchesFor } from '../../src/quota/ledger-file.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { tempDir } from '../helpers/temp-dir.js'
import { vouchedRestart } from './vouch-restart.js'

t.setTimeout(60_000)

/** The file as the earlier version's writer left it: no ALONE_RECORDED. */
function writeEarlierFile (dir: string, member: string, sends: unknown[] = []): void {
  mkdirSync(dirname(join(dir, LEDGER_PATH)), { recursive: true })
  writeFileSync(join(dir, LEDGER_PATH), JSON.stringify({ version: 1, member, sends }))
}

t.test('the earlier version\'s file: read, its sends restored, vouching for nothing', async (t) => {
  const c = fakeClock()
  const dir = tempDir('vouch-earlier-')
  const rules = parseRules('GET /x 2/4s', 'RATE_LIMITS').rules
  writeEarlierFile(dir, 'm', [{ scope: 'GET /x', limit: '2/4s', id: 'old:0', at: c.clock.wallNow() - 1_000 }])
  const loaded = readLedgerFile(dir)
  const restored = restoreLedger(createLedger(c.clock), loaded, rules, c.clock, () => 1)
  t.match(loaded, { state: 'loaded', member: 'm' })
  t.equal(restored, 1, 'its send counts')
  t.notOk(vouchesFor(loaded, restored, c.clock), 'it vouches for nothing')
  // This version's writer marks its file: read whole, it vouches.
  await createLedgerWriter(dir, 'm', createLedger(c.clock), c.clock).save()
  t.match(JSON.parse(readFileSync(join(dir, LEDGER_PATH), 'utf8')), { aloneRecorded: true })
  t.ok(vouchesFor(readLedgerFile(dir), 0, c.clock), 'this version\'s file vouches')
})

t.test('the earlier version sent S alone, its write failed: the fleet stays within 2 per 4 s across the restart', async (t) => {
  const { most, vouched } = await vouchedRestart(t, {
    // Its last write (before the cut) held nothing; from then on writes fail and sends go on,
    // as its persisting store did: the store itself, unwrapped.
    persisting: (store, dir, member) => { writeEarlierFile(dir, member); return store },
    waitMs: 600
  })
  t.notOk(vouched, 'the next run does not vouch for the file')
  t.ok(most <= 2, `most in any 3900 ms: ${most}`)
})
