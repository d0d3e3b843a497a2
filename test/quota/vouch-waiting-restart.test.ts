// A send decided alone is written to STATE_DIR before it leaves, and may wait a while after
// (a connection, a connect); it counts from its departure. A crash before the next write, and
// a restart vouching for the file, tell Redis the file's time: it must not be earlier than the
// departure, or the fleet frees S's place that much early (once 3 in 3900 ms under 2/4s).
import pino from 'pino'
import t from 'tap'
import { systemClock } from '../../src/clock.js'
import { createLedgerWriter, persistingStore } from '../../src/quota/ledger-file.js'
import { vouchedRestart } from './vouch-restart.js'

t.setTimeout(60_000)

t.test('S waited 2 s before it left: the fleet stays within 2 per 4 s across the restart', async (t) => {
  const { most, vouched } = await vouchedRestart(t, {
    persisting: (store, dir, member, ledger) => persistingStore(store, createLedgerWriter(dir, member, ledger, systemClock).save, pino({ level: 'silent' })),
    waitMs: 2_000
  })
  t.ok(vouched, 'the next run vouches for the file (its lapse ends at once)')
  t.ok(most <= 2, `most in any 3900 ms: ${most}`)
})
