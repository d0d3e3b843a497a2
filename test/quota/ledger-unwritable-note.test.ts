// STATE_DIR's ledger that cannot be written is a /readyz note (still ready) while it lasts, with
// the errno code and never the file's content; embedded, sends go on (nothing is decided alone
// without Redis), so the note says only what a restart would forget. A write that succeeds again
// ends the note.
import t from 'tap'
import { createQuotaGuard, type Caller } from '../../src/quota/guard.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import type { RateLimitConfig } from '../../src/config/rate-limits.js'
import { createLedger } from '../../src/quota/ledger.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

const STAYING: Caller = { destroyed: false, once: () => undefined, removeListener: () => undefined }

t.test('embedded: the note while STATE_DIR cannot be written, sends going on; gone once it can', async (t) => {
  const { clock } = fakeClock()
  const { rules } = parseRules('GET /a 5/1s', 'RATE_LIMITS')
  const rule = rules[0]
  if (rule === undefined) throw new Error('no rule')
  const config: RateLimitConfig = {
    rules,
    rulesSource: 'RATE_LIMITS',
    maxWaitMs: 0,
    cooldownMs: 1_000,
    cooldownMaxMs: 60_000,
    redisUrl: undefined,
    redisUrlSource: undefined,
    redisUrlFile: undefined,
    redisTimeoutMs: 200,
    fleetSize: 0,
    aloneMaxMs: 3_600_000,
    headers: true
  }
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
