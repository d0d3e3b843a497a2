// A restart that vouches for STATE_DIR's ledger, in real time on a real Redis: sidecar A, cut
// off, sends S alone; it crashes before another write of its file; its next run reads the file
// and, vouching, ends its lapse in Redis at once. Meanwhile B spends all the fleet lets it.
// What reached TI must stay within N in any W (2/4s here): S included, counted from when it left.
import pino from 'pino'
import type { Test } from 'tap'
import { systemClock, type Clock } from '../../src/clock.js'
import { parseRules, type Rule } from '../../src/config/rate-limit-rules.js'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore } from '../../src/quota/fleet-store.js'
import { createLedger, type Ledger } from '../../src/quota/ledger.js'
import { readLedgerFile, restoreLedger, vouchesFor } from '../../src/quota/ledger-file.js'
import { createRedisStore, type RedisStore } from '../../src/quota/redis-backend.js'
import type { Store } from '../../src/quota/store.js'
import { startRedis } from '../helpers/redis.js'
import { tempDir } from '../helpers/temp-dir.js'
import { cuttable, spendUntil, until } from './real-time-member.js'

export const rule = parseRules('GET /x 2/4s', 'RATE_LIMITS').rules[0] as Rule
const { id: scope, limits } = rule
export const W = 4_000
const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }
const log = pino({ level: 'silent' })

function member (url: string, opts: { ledger?: Ledger, memberId?: string, ledgerWhole?: boolean, clock?: Clock }, wrap = (r: RedisStore): RedisStore => r) {
  const clock = opts.clock ?? systemClock
  return createFleetStore({
    redis: wrap(createRedisStore({ url, timeoutMs: 200, prefix: 'vouch:', clock })),
    clock,
    log,
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: [rule],
    redisTimeoutMs: 200,
    fleetFloor: 2,
    aloneMaxMs: 60_000,
    timing: { heartbeatMs: 1_000, presenceTtlMs: 3_000, freshGraceMs: 0 },
    onCooldown: () => {},
    ...opts
  })
}

export interface FirstRun {
  /** A's store as its guard would wrap it, writing `dir` (a ledger writer's `save`). */
  persisting: (store: Store, dir: string, member: string, ledger: Ledger) => Store
  /** Called once A is cut off, before it admits S. */
  cutOff?: () => void
  /** How long S waits after it was admitted before it leaves (a connection, a connect). */
  waitMs: number
  /** Called once S left, before A crashes (a write of the file). */
  beforeCrash?: () => Promise<void>
  /** The node's wall clock stepped forward this far before the next run (NTP, a VM resumed); its monotonic clock not. */
  wallStepMs?: number
}

/** The most arrivals at TI in any interval of `W` less 100 ms (the network), and whether A's next run vouched. */
export async function vouchedRestart (t: Test, first: FirstRun): Promise<{ most: number, vouched: boolean }> {
  const server = await startRedis(t)
  const dir = tempDir('vouch-')
  const ledger = createLedger(systemClock)
  let link: ReturnType<typeof cuttable> | undefined
  const a = member(server.url, { ledger, memberId: 'member-a', ledgerWhole: true }, (r) => { link = cuttable(r); return link.redis })
  const aStore = first.persisting(a, dir, 'member-a', ledger)
  const b = member(server.url, {})
  await a.start()
  await b.start()
  t.teardown(() => b.close())
  await until('both shared', () => a.status().state === 'shared' && b.status().state === 'shared')
  link?.cut()
  first.cutOff?.()
  await until('A degraded', () => a.status().state === 'degraded')
  let s = ''
  await until('A admits S alone', async () => {
    const taken = await aStore.take(scope, limits)
    if (taken.kind === 'ok') s = taken.id
    return taken.kind === 'ok'
  }, 30_000)
  const decided = performance.now()
  const arrivals: number[] = []
  await sleep(500)
  const once = await b.take(scope, limits)
  if (once.kind === 'ok' && b.leaving(scope, limits, once.id) === undefined) arrivals.push(performance.now())
  await sleep(Math.max(0, first.waitMs - 500))
  t.equal(aStore.leaving(scope, limits, s), undefined, 'S leaves, alone, within the bound')
  arrivals.push(performance.now())
  await first.beforeCrash?.()
  // A crashes (degraded, it does not leave Redis); its next run reads the file.
  await a.close()
  const clock: Clock = { ...systemClock, wallNow: () => Date.now() + (first.wallStepMs ?? 0) }
  const loaded = readLedgerFile(dir)
  const again = createLedger(clock)
  const restored = restoreLedger(again, loaded, [rule], clock, () => 1)
  const vouched = vouchesFor(loaded, restored, clock)
  const a2 = member(server.url, { ledger: again, memberId: 'member-a', ledgerWhole: vouched, clock })
  await a2.start()
  t.teardown(() => a2.close())
  t.equal(a2.status().state, 'shared', 'A back, shared')
  await spendUntil(b, rule, decided + 2 * W, arrivals)
  t.comment(`arrivals (ms after S was admitted): ${arrivals.map((x) => Math.round(x - decided)).join(', ')}`)
  let most = 0
  for (const at of arrivals) most = Math.max(most, arrivals.filter((x) => x >= at && x < at + W - 100).length)
  return { most, vouched }
}
