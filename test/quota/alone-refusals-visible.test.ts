// The two refusals of a sidecar cut off from Redis that are not its share spent, as an operator
// sees them: past RATE_LIMIT_ALONE_MAX_MS (/status rateLimits.aloneEnded, every share 0, the
// reason alone_ended, the /readyz note), and a send decided alone that STATE_DIR cannot record
// (a message naming STATE_DIR, never "redis not answering", the reason unrecorded, a /readyz
// note with the errno code). The real guard over the real fleet store on the scripted Redis.
import t, { type Test } from 'tap'
import { createQuotaGuard, type Caller } from '../../src/quota/guard.js'
import type { RateLimitConfig } from '../../src/config/rate-limits.js'
import { createLedger } from '../../src/quota/ledger.js'
import { createMetrics } from '../../src/metrics.js'
import { systemClock } from '../../src/clock.js'
import { parseMetrics, seriesKey } from '../helpers/metrics-scrape.js'
import { captureLogs } from '../helpers/logs.js'
import { cutOffUntilAlone, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const RULE = 'GET /a 6/1s'
const BOUND_MS = 5_000
const STAYING: Caller = { destroyed: false, once: () => undefined, removeListener: () => undefined }

async function cutOffGuard (t: Test, { failingDisk = false } = {}) {
  const f = await scriptedFleet(t, RULE, { aloneMaxMs: BOUND_MS })
  const metrics = createMetrics({ defaultMetrics: false, rateLimitRedis: true })
  const config: RateLimitConfig = {
    rules: [f.rule],
    rulesSource: 'RATE_LIMITS',
    maxWaitMs: 0,
    cooldownMs: 1_000,
    cooldownMaxMs: 60_000,
    redisUrl: 'redis://127.0.0.1:6379',
    redisUrlSource: 'RATE_LIMIT_REDIS_URL',
    redisUrlFile: undefined,
    redisTimeoutMs: TIMEOUT_MS,
    fleetSize: 2,
    aloneMaxMs: BOUND_MS,
    headers: true
  }
  const save = async (): Promise<void> => { throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' }) }
  const guard = createQuotaGuard({
    config,
    clock: f.c.clock,
    log: captureLogs('debug').log,
    metrics,
    fleet: () => f.store,
    ...(failingDisk ? { durable: { ledger: createLedger(systemClock), save } } : {})
  })
  const lastSent = await cutOffUntilAlone(f)
  const refused = async (reason: string): Promise<number> =>
    parseMetrics(await metrics.registry.metrics()).get(seriesKey('store_auth_proxy_rate_limited_total', { rule: f.rule.id, reason, action: 'refused' })) ?? 0
  return { f, guard, lastSent, refused, admit: async () => await guard.admit(f.rule, STAYING) }
}

t.test('past RATE_LIMIT_ALONE_MAX_MS: /status aloneEnded, every share 0, reason alone_ended (at admission or as it leaves), a /readyz note', async (t) => {
  const { f, guard, lastSent, refused, admit } = await cutOffGuard(t)
  const waiting = await admit()
  t.match(waiting, { ok: true }, 'alone, within the bound: its share')
  t.match(guard.status(), { aloneEnded: false, rules: [{ share: [3] }] })
  await f.c.tick(lastSent + BOUND_MS - f.c.clock.now())
  const verdict = await admit()
  t.match(verdict, { ok: false, reason: 'degraded', aloneEnded: true })
  if (verdict.ok || verdict.reason === 'gone') throw new Error('not refused')
  t.match(guard.describe(verdict).message, /cut off from rate-limit redis for longer than RATE_LIMIT_ALONE_MAX_MS/)
  t.match(guard.status(), { degraded: true, aloneEnded: true, rules: [{ share: [0] }] }, 'no share while it holds')
  t.equal(await refused('alone_ended'), 1)
  t.equal(await refused('degraded'), 0, 'not counted as a share spent')
  // The one admitted within the bound has not left yet: refused as it leaves, unsent.
  const late = guard.leaving(waiting.ok ? waiting.ticket : undefined)
  t.match(late, { ok: false, reason: 'degraded', late: true, aloneEnded: true })
  if (late === undefined || late.ok || late.reason === 'gone') throw new Error('not refused as it left')
  t.match(guard.describe(late).message, /waited to be sent .*\(cut off from rate-limit redis for longer than RATE_LIMIT_ALONE_MAX_MS\), so it was not sent/)
  t.equal(await refused('alone_ended'), 2, 'counted as past the bound')
  t.match(guard.readinessNote(), /cut off for longer than RATE_LIMIT_ALONE_MAX_MS, budgeted requests are refused until it answers/)

  f.double.script.down = undefined
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.match(guard.status(), { degraded: false, aloneEnded: false, rules: [{ share: [3] }] }, 'Redis answers: over')
})

t.test('a send decided alone that STATE_DIR cannot record: says STATE_DIR, reason unrecorded, a /readyz note', async (t) => {
  const { guard, refused, admit } = await cutOffGuard(t, { failingDisk: true })
  const verdict = await admit()
  t.match(verdict, { ok: false, reason: 'degraded', unrecorded: true })
  if (verdict.ok || verdict.reason === 'gone') throw new Error('not refused')
  const { message } = guard.describe(verdict)
  t.match(message, /^STATE_DIR cannot record a send of rule GET \/a decided without rate-limit redis/)
  t.notMatch(message, /not answering|share is spent/, 'the cause is the disk, not Redis nor the share')
  t.equal(await refused('unrecorded'), 1)
  t.equal(await refused('degraded'), 0)
  t.match(guard.readinessNote(), /STATE_DIR cannot record the rate-limit ledger \(ENOSPC\): a restart would forget this sidecar's sends; while redis does not answer, budgeted requests are refused/)
  t.match(guard.status(), { aloneEnded: false, rules: [{ share: [3] }] }, 'the share itself is not spent')
})
