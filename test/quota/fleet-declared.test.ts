// Where the features meet, case 10: a fleet larger than RATE_LIMIT_FLEET_SIZE declares is the one moment a
// sidecar can see the guarantee's first assumption broken. It is logged once per change of
// the count, noted in /readyz (still ready) and /status, and declared vs present are metrics
// (the chart's StoreAuthProxyFleetLargerThanDeclared alert reads them: test/deploy/chart-rules).
import t, { type Test } from 'tap'
import { request } from 'undici'
import { createQuotaGuard } from '../../src/quota/guard.js'
import { createFleetStore } from '../../src/quota/fleet-store.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { startRedis } from '../helpers/redis.js'
import { startStandIn } from '../helpers/build.js'
import { scriptedRedis, TIMEOUT_MS, TIMING } from './fleet-double.js'
import { eventually, quotaSidecar } from './sidecar.js'

/** The guard over the fleet store over the scripted Redis, started with `present` sidecars seen. */
async function guardOver (t: Test, fleetFloor: number, present: number) {
  const c = fakeClock()
  const double = scriptedRedis()
  double.script.present = present
  double.script.fleetSize = Math.max(present, fleetFloor)
  const logs = captureLogs('debug')
  const metrics = createMetrics({ defaultMetrics: false, rateLimitRedis: true })
  const { rules } = parseRules('GET /a 6/1s', 'RATE_LIMITS')
  const guard = createQuotaGuard({
    config: { rules, rulesSource: 'RATE_LIMITS', maxWaitMs: 0, cooldownMs: 1_000, cooldownMaxMs: 60_000, redisUrl: 'redis://x', redisUrlSource: undefined, redisUrlFile: undefined, redisTimeoutMs: TIMEOUT_MS, fleetSize: fleetFloor, aloneMaxMs: 3_600_000, headers: true },
    clock: c.clock,
    log: logs.log,
    metrics,
    fleet: (onCooldown) => createFleetStore({ redis: double.redis, clock: c.clock, log: logs.log, metrics, rules, redisTimeoutMs: TIMEOUT_MS, fleetFloor, timing: TIMING, onCooldown })
  })
  await guard.start()
  t.teardown(() => guard.close())
  const gauge = async (name: 'rateLimitFleetDeclared' | 'rateLimitFleetPresent' | 'rateLimitFleetSize'): Promise<number | undefined> => (await metrics[name]?.get())?.values[0]?.value
  /** Redis sees `n` present from the next heartbeat on. */
  const see = async (n: number): Promise<void> => {
    double.script.present = n
    double.script.fleetSize = Math.max(n, fleetFloor)
    await c.tick(TIMING.heartbeatMs)
    await c.tick(0)
  }
  const said = () => logs.entries().filter((e) => /RATE_LIMIT_FLEET_SIZE declares/.test(String(e.msg))).map((e) => ({ level: e.level, declared: e.declared, present: e.present }))
  return { guard, gauge, see, said, double }
}

t.test('more present than declared: logged once per change, noted in /readyz, in /status, declared vs present as metrics', async (t) => {
  const g = await guardOver(t, 2, 3)
  t.same(g.said(), [{ level: 40, declared: 2, present: 3 }], 'warned at the first contact')
  t.equal(g.guard.readinessNote(), '3 sidecars present in redis, more than RATE_LIMIT_FLEET_SIZE=2: set it to the most sidecars that run at once')
  t.equal(g.guard.readinessHold(), undefined, 'still ready')
  t.match(g.guard.status(), { fleet: { size: 3, present: 3, declared: 2, overDeclared: true } })
  t.equal(await g.gauge('rateLimitFleetDeclared'), 2)
  t.equal(await g.gauge('rateLimitFleetPresent'), 3)

  await g.see(3)
  await g.see(3)
  t.equal(g.said().length, 1, 'the same count is not said again at each heartbeat')
  await g.see(4)
  t.same(g.said()[1], { level: 40, declared: 2, present: 4 }, 'a new count is')
  t.match(g.guard.readinessNote(), /^4 sidecars present in redis, more than RATE_LIMIT_FLEET_SIZE=2/)
  await g.see(2)
  t.same(g.said().slice(2), [{ level: 30, declared: 2, present: 2 }], 'back within the declared size: said once')
  t.equal(g.guard.readinessNote(), undefined)
  t.match(g.guard.status(), { fleet: { present: 2, declared: 2, overDeclared: false } })
  await g.see(1)
  t.equal(g.said().length, 3, 'fewer than declared is the safe side: nothing to say')
})

t.test('nothing declared: the size is whatever is present, nothing to report', async (t) => {
  const g = await guardOver(t, 0, 3)
  t.same(g.said(), [])
  t.match(g.guard.status(), { fleet: { size: 3, present: 3, declared: 0, overDeclared: false } })
  t.equal(await g.gauge('rateLimitFleetDeclared'), 0)
})

t.test('over the declared size and cut off: both notes in /readyz', async (t) => {
  const g = await guardOver(t, 2, 3)
  g.double.script.down = new Error('Connection is closed.')
  g.double.emit(false, g.double.script.down)
  t.equal(g.guard.readinessNote(), 'rate limits not shared: redis redis://127.0.0.1:6379 Connection is closed.; each sidecar spends only its share (fleet size 3); ' +
    '3 sidecars present in redis, more than RATE_LIMIT_FLEET_SIZE=2: set it to the most sidecars that run at once')
  t.equal(g.guard.readinessHold(), undefined)
})

t.test('three sidecars on one Redis with RATE_LIMIT_FLEET_SIZE=2: each says so in its log, /readyz (ready), /status and metrics', async (t) => {
  const redis = await startRedis(t)
  const standIn = await startStandIn(t)
  const upstream = await startRecordingUpstream(t)
  const env = { RATE_LIMITS: 'GET /v2/store/** 3/6s', RATE_LIMIT_FLEET_SIZE: '2' }
  const options = { redisUrl: redis.url, authUrl: standIn.url, upstream, systemClock: true }
  const sidecars = [await quotaSidecar(t, env, options), await quotaSidecar(t, env, options), await quotaSidecar(t, env, options)]
  const third = sidecars[2]
  if (third === undefined) throw new Error('three sidecars')
  // The third sees all three at its first contact (or, should a busy machine delay a heartbeat
  // past the presence TTL, at the next one).
  await eventually(t, 'three present', async () => ((await third.status()).rateLimits as { fleet: { present: number } }).fleet.present === 3)
  const ready = await request(third.adminUrl + '/readyz')
  t.equal(ready.statusCode, 200)
  t.match(await ready.body.json(), { status: 'ready', reason: /^token held; 3 sidecars present in redis, more than RATE_LIMIT_FLEET_SIZE=2/ })
  t.match(await third.status(), { rateLimits: { fleet: { size: 3, present: 3, declared: 2, overDeclared: true } } })
  const m = await scrape(third.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_fleet_declared', {})), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_fleet_present', {})), 3)
  t.ok(third.logs.entries().some((e) => e.level === 40 && e.declared === 2 && e.present === 3), 'said in its log (once per change: the scripted test above)')
})
