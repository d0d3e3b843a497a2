// STATE_DIR's ledger that cannot be written is a /readyz note (still ready) while it lasts, with
// the errno code and never the file's content; embedded, sends go on (nothing is decided alone
// without Redis), so the note says only what a restart would forget. A write that succeeds again
// ends the note.
import t from 'tap'
import { createQuotaGuard, type Caller } from '../../src/quota/guard.js'
import { loadConfig } from '../../src/config/load.js'
import { createLedger } from '../../src/quota/ledger.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

const STAYING: Caller = { destroyed: false, once: () => undefined, removeListener: () => undefined }

t.test('embedded: the note while STATE_DIR cannot be written, sends going on; gone once it can', async (t) => {
  const { clock } = fakeClock()
  const env = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
  const config = loadConfig({ ...env, RATE_LIMITS: 'GET /a 5/1s', RATE_LIMIT_MAX_WAIT_MS: '0' }).rateLimits
  const rule = config.rules[0]
  if (rule === undefined) throw new Error('no rule')
  let disk: string | undefined = 'EROFS'
  const save = async (): Promise<void> => { if (disk !== undefined) throw Object.assign(new Error('the disk said no'), { code: disk }) }
  const guard = createQuotaGuard({
    config,
    clock,
    log: captureLogs('debug').log,
    metrics: createMetrics({ defaultMetrics: false }),
    durable: { ledger: createLedger(clock), save }
  })
  t.equal(guard.readinessNote(), undefined, 'nothing written yet: nothing to say')
  t.match(await guard.admit(rule, STAYING), { ok: true }, 'embedded: sent all the same')
  t.equal(guard.readinessNote(), 'STATE_DIR cannot record the rate-limit ledger (EROFS): a restart would forget this sidecar\'s sends')
  disk = undefined
  t.match(await guard.admit(rule, STAYING), { ok: true })
  t.equal(guard.readinessNote(), undefined, 'written again: no note')
})
