// The STATE_DIR ledger dates its sends by the wall clock, which the next run reads them by. A
// wall clock stepped forward between the two (NTP after a boot with a slow RTC, a VM resumed)
// made every send look older: counted shorter, and a vouching restart told Redis the earlier
// times (3 in 3900 ms under 2/4s, wall-step-vouch.test.ts). On the same boot the node's
// monotonic clock dates them too, and the younger age counts; another boot's or unknown, by
// the wall clock as before, vouching for nothing (the lapse in Redis stays held).
import t from 'tap'
import { bootKey, type Clock } from '../../src/clock.js'
import { parseRules, type Rule } from '../../src/config/rate-limit-rules.js'
import { createLedger } from '../../src/quota/ledger.js'
import { createLedgerWriter, readLedgerFile, restoreLedger, vouchesFor } from '../../src/quota/ledger-file.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { tempDir } from '../helpers/temp-dir.js'

const rule = parseRules('GET /x 2/1m', 'RATE_LIMITS').rules[0] as Rule
const { id: scope, limits } = rule

/** A run that sent one send 1 s before its last write; `between` happens before the next run reads the file by `next`. */
async function restart (between: (c: ReturnType<typeof fakeClock>) => void, next = (c: Clock): Clock => c) {
  const c = fakeClock()
  const dir = tempDir('ledger-wall-step-')
  const ledger = createLedger(c.clock)
  ledger.record(scope, limits, 's')
  ledger.leave(scope, limits, 's')
  await c.tick(1_000)
  await createLedgerWriter(dir, 'm', ledger, c.clock).save()
  await c.tick(500)
  between(c)
  const clock = next(c.clock)
  const loaded = readLedgerFile(dir)
  const again = createLedger(clock)
  const restored = restoreLedger(again, loaded, [rule], clock, () => 1)
  return { ages: again.open().map((s) => s.ageMs), vouched: vouchesFor(loaded, restored, clock) }
}

t.test('the same boot, no step: by either clock 1.5 s old, vouching', async (t) => {
  t.same(await restart(() => {}), { ages: [1_500], vouched: true })
})

t.test('the wall clock stepped 2.5 s forward: still 1.5 s old (the monotonic age), vouching', async (t) => {
  t.same(await restart((c) => { c.stepWall(2_500) }), { ages: [1_500], vouched: true })
})

t.test('the wall clock stepped back: younger by it (counted longer), from now at most', async (t) => {
  t.same(await restart((c) => { c.stepWall(-1_000) }), { ages: [500], vouched: true })
  t.same(await restart((c) => { c.stepWall(-5_000) }), { ages: [0], vouched: true })
})

t.test('suspended between the runs: the monotonic clock stood still, the younger age counts', async (t) => {
  t.same(await restart((c) => { c.suspend(10_000) }), { ages: [1_500], vouched: true })
})

t.test('another boot: by the wall clock as before, vouching for nothing', async (t) => {
  t.same(await restart((c) => { c.reboot() }), { ages: [1_500], vouched: false })
  t.same(await restart((c) => { c.reboot(); c.stepWall(2_500) }), { ages: [4_000], vouched: false })
})

t.test('the boot unknown (not Linux), reading or writing: by the wall clock, vouching for nothing', async (t) => {
  const unknown = (c: Clock): Clock => ({ ...c, sinceBoot: () => undefined })
  t.same(await restart(() => {}, unknown), { ages: [1_500], vouched: false })
  const c = fakeClock()
  const dir = tempDir('ledger-wall-step-')
  await createLedgerWriter(dir, 'm', createLedger(c.clock), unknown(c.clock)).save()
  const loaded = readLedgerFile(dir)
  t.match(loaded, { state: 'loaded', aloneRecorded: true, written: undefined })
  t.notOk(vouchesFor(loaded, 0, c.clock), 'a file written with no boot vouches for nothing')
})

t.test('a reading behind the file\'s under the same key (another origin): by the wall clock, vouching for nothing', async (t) => {
  // The writer's clock shifted ahead of the reader's (a time namespace its key did not name):
  // with the wall stepped too, both ages would be too old, and the file would vouch.
  const behind = (c: Clock): Clock => ({ ...c, sinceBoot: () => ({ boot: 'boot-1', ms: c.now() - 10_000 }) })
  t.same(await restart((c) => { c.stepWall(2_500) }, behind), { ages: [4_000], vouched: false })
})

t.test('the boot key names a time namespace\'s monotonic shift, so readings under another shift do not compare', async (t) => {
  const id = 'cab9be41-daf6-4de2-9003-3760d9e692ac\n'
  t.equal(bootKey(id, undefined), 'cab9be41-daf6-4de2-9003-3760d9e692ac', 'a kernel without time namespaces: the boot id')
  t.equal(bootKey(id, 'monotonic           0         0\nboottime            0         0\n'), 'cab9be41-daf6-4de2-9003-3760d9e692ac', 'no shift: the boot id')
  t.equal(bootKey(id, 'monotonic         -10         0\nboottime            0         0\n'), 'cab9be41-daf6-4de2-9003-3760d9e692ac/-10 0', 'shifted: named')
  t.equal(bootKey(id, 'boottime 5 0\nmonotonic 0 250\n'), 'cab9be41-daf6-4de2-9003-3760d9e692ac/0 250', 'the monotonic line wherever it is')
  t.equal(bootKey('', 'monotonic 0 0\n'), undefined, 'no boot id: unknown')
  t.equal(bootKey(undefined, undefined), undefined)
})
