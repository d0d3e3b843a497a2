// A scripted Redis for the fleet store's policy tests: every command answers what the test
// set, or fails with `down` (PING then answers false); a reassertion or a heartbeat can be held
// until the test lets it answer. Each command is recorded in `calls`.
import type { Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { createFleetStore, type FleetTiming } from '../../src/quota/fleet-store.js'
import type { HeartbeatReply, Member, RedisStore, ReassertLimit, ReassertReply, TakeReply } from '../../src/quota/redis-backend.js'
import type { Ledger } from '../../src/quota/ledger.js'
import { parseRules, type Limit } from '../../src/config/rate-limit-rules.js'
import type { Remaining } from '../../src/quota/rate-limit-fields.js'
import type { CooldownRequest, Store, Take } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

export type Script = ReturnType<typeof scriptedRedis>['script']

/** A take whose request, admitted, leaves at once (as most do: the wait to leave is late-sends.test.ts's). */
export async function takeAndSend (store: Pick<Store, 'take' | 'leaving' | 'refund'>, scope: string, limits: readonly Limit[]): Promise<Take> {
  const taken = await store.take(scope, limits)
  if (taken.kind !== 'ok') return taken
  // Refused as it leaves (fleet-departures.ts): given back, nothing sent.
  const stopped = store.leaving(scope, limits, taken.id)
  if (stopped === undefined) return taken
  store.refund(scope, limits, taken.id)
  return { kind: stopped.reason, ms: stopped.ms }
}

export function scriptedRedis () {
  const calls: string[] = []
  const cooledDown: Array<{ scope: string, request: CooldownRequest }> = []
  const s = {
    down: undefined as Error | undefined,
    lastError: undefined as unknown,
    fleetSize: 2,
    present: 2,
    take: (): Partial<TakeReply> => ({ code: 'ok' }),
    reassert: (): Partial<ReassertReply> => ({}),
    heartbeat: (): Partial<HeartbeatReply> => ({}),
    /** What a read of the fleet's tally (the RateLimit fields) answers. */
    peek: (): Remaining[] => [],
    coolDown: (request: CooldownRequest): number => request.retryAfterMs ?? request.baseMs,
    /** Sees each reassertion's member id and send ids. */
    onReassert: (_member: string, _sends: string[]): void => {},
    /** Held commands answer only when this resolves. */
    hold: { reassert: undefined as Promise<void> | undefined, heartbeat: undefined as Promise<void> | undefined }
  }
  let listener: ((up: boolean, err?: unknown) => void) | undefined
  const run = async (name: string, held?: Promise<void>): Promise<void> => {
    calls.push(name)
    await held
    if (s.down !== undefined) throw s.down
  }
  const fleet = () => ({ fleetSize: s.fleetSize, present: s.present })
  const redis = {
    displayUrl: 'redis://127.0.0.1:6379',
    // Every command answers as it is asked: none waits.
    unansweredFor: () => 0,
    async readClock () { await run('time') },
    async take (): Promise<TakeReply> { await run('take'); return { code: 'ok', ms: 0, ...fleet(), ...s.take() } },
    async reassert (member: Member, limits: readonly ReassertLimit[]): Promise<ReassertReply> {
      s.onReassert(member.id, [...new Set(limits.flatMap((l) => l.sends.map((send) => send.id)))])
      await run('reassert', s.hold.reassert)
      return { late: false, lost: false, ...fleet(), epoch: 'e:1', epochAgeMs: 60_000, ...s.reassert() }
    },
    async heartbeat (): Promise<HeartbeatReply> {
      await run('heartbeat', s.hold.heartbeat)
      return { code: 'ok', ...fleet(), cooldowns: new Map(), ...s.heartbeat() }
    },
    async peek (): Promise<Remaining[]> { await run('peek'); return s.peek() },
    async refund () { await run('refund') },
    async leave () { await run('leave') },
    async coolDown (scope: string, request: CooldownRequest) { await run('cooldown'); cooledDown.push({ scope, request }); return s.coolDown(request) },
    onState (fn: (up: boolean, err?: unknown) => void) { listener = fn },
    async connect () { return s.down === undefined },
    async ping () { calls.push('ping'); return s.down === undefined },
    async memoryPolicy () { return { policy: 'noeviction', maxBytes: 0, evicting: false } },
    lastError: () => s.lastError,
    describe: (err: unknown) => err instanceof Error ? err.message : String(err),
    async close () {}
  }
  return {
    redis: redis as unknown as RedisStore,
    script: s,
    calls,
    cooledDown,
    count: (name: string) => calls.filter((c) => c === name).length,
    emit: (up: boolean, err?: unknown) => { listener?.(up, err) }
  }
}

/** A promise the test resolves: holds a command until then. */
export function gate () {
  let open: () => void = () => {}
  const promise = new Promise<void>((resolve) => { open = resolve })
  return { promise, open }
}

export const TIMEOUT_MS = 100
export const TIMING: FleetTiming = { heartbeatMs: 200, presenceTtlMs: 600, freshGraceMs: 0 }

/** A fleet store over the scripted Redis on a fake clock, started; `before` scripts Redis before the start. */
export async function scriptedFleet (t: Test, rules: string, { fleetFloor = 2, timing = {}, before = (_s: Script) => {}, ledger, memberId, aloneMaxMs }: { fleetFloor?: number, timing?: Partial<FleetTiming>, before?: (s: Script) => void, ledger?: Ledger, memberId?: string, aloneMaxMs?: number } = {}) {
  const c = fakeClock()
  const double = scriptedRedis()
  before(double.script)
  const logs = captureLogs('debug')
  const metrics = createMetrics({ defaultMetrics: false, rateLimitRedis: true })
  const cooled: string[] = []
  const parsed = parseRules(rules, 'RATE_LIMITS')
  const rule = parsed.rules[0]
  if (rule === undefined) throw new Error(parsed.problems.join('\n'))
  const store = createFleetStore({
    redis: double.redis,
    clock: c.clock,
    log: logs.log,
    metrics,
    rules: parsed.rules,
    redisTimeoutMs: TIMEOUT_MS,
    fleetFloor,
    timing: { ...TIMING, ...timing },
    onCooldown: (scope) => { cooled.push(scope) },
    ...(ledger === undefined ? {} : { ledger }),
    ...(memberId === undefined ? {} : { memberId }),
    ...(aloneMaxMs === undefined ? {} : { aloneMaxMs })
  })
  await store.start()
  t.teardown(() => store.close())
  return {
    c,
    store,
    double,
    logs,
    metrics,
    cooled,
    rule,
    take: async (): Promise<Take> => await takeAndSend(store, rule.id, rule.limits),
    warnings: () => logs.entries().filter((e) => e.level === 40),
    /** The rate_limit_backend gauge's value for a backend. */
    backend: async (name: 'redis' | 'memory') => (await metrics.rateLimitBackend.get()).values.find((v) => v.labels.backend === name)?.value
  }
}

/**
 * Shares a while (heartbeats every 200 ms; the last one sent 50 ms before the cut), is cut off,
 * and moves the clock to when spending alone starts for a 1 s window: the last presence's send
 * + timeout + TTL + the window. Returns when that last heartbeat was sent.
 */
export async function cutOffUntilAlone (f: Pick<Awaited<ReturnType<typeof scriptedFleet>>, 'c' | 'double'>): Promise<number> {
  const closed = new Error('Connection is closed.')
  await f.c.tick(5_050)
  await f.c.tick(0)
  const lastSent = f.c.clock.now() - 50
  f.double.script.down = closed
  f.double.emit(false, closed)
  await f.c.tick(lastSent + TIMEOUT_MS + TIMING.presenceTtlMs + 1_000 - f.c.clock.now())
  return lastSent
}
