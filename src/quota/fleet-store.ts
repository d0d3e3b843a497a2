// The fleet's store: budgets shared through Redis by every sidecar on one credential, with
// this sidecar's own ledger as the insurance (compare rate-limiter-flexible's
// insuranceLimiter). Callers above it never branch on which answered. The guarantee it keeps
// (docs/quota-guard.md): in any window of a limit, the fleet sends at most the limit — with
// Redis up, slow, partitioned, restarted empty or gone — as long as RATE_LIMIT_FLEET_SIZE
// covers every sidecar running at once.
//
// How, in short:
// - Shared: each take is one Redis script on sliding logs; room is kept for the share
//   (limit / fleet size) of every sidecar not present, since it may be spending on its own.
// - Degraded (a take failed or was late): this sidecar asks Redis nothing more until it
//   answers a PING again, and spends only its share of RATE_LIMIT_FLEET_SIZE (none without
//   it: a size seen in Redis may lag a sidecar joining), and only from one window after the last
//   moment Redis could still have counted it present (every admission in such a window kept
//   its share free), or after this process started (an earlier run of it may have spent).
//   Fleet size 1, declared: the whole budget, one window after start.
// - Back: one script tells Redis the ledger's open sends again (idempotent ids) and registers
//   the sidecar present, atomically; a lost epoch gates every limit for one window.
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { Metrics } from '../metrics.js'
import { createLedger, type Ledger, type OpenSend } from './ledger.js'
import { ledgerBudget, type Remaining } from './rate-limit-fields.js'
import { createMemoryPolicyReport, type MemoryPolicy } from '../redis/memory-policy.js'
import { redisAuthProblem, type Member, type ReassertLimit, type RedisStore } from './redis-backend.js'
import type { Limit, Rule } from '../config/rate-limit-rules.js'
import { createCooldowns, createSendIds, newMemberId, NOTHING_TAKEN, UPSTREAM_SCOPE, type CooldownRequest, type Cooldowns, type Store, type Take } from './store.js'

/** The fleet protocol's timing; tests shorten it. */
export interface FleetTiming {
  /** How often a sidecar renews its presence (and, while cut off, PINGs Redis). */
  heartbeatMs: number
  /** A sidecar not heard from for this long is absent: the others keep its share free. */
  presenceTtlMs: number
  /** An epoch younger than this may have replaced a lost one whose sidecars have not told it their sends yet. */
  freshGraceMs: number
}

export const DEFAULT_FLEET_TIMING: FleetTiming = Object.freeze({ heartbeatMs: 1_000, presenceTtlMs: 3_000, freshGraceMs: 3_000 })

export type FleetState = 'connecting' | 'shared' | 'degraded'
/** As reported: `settling` is shared but within the grace of a young epoch (budgets still refused). */
export type FleetReportedState = FleetState | 'settling'

export interface FleetStatus {
  state: FleetReportedState
  /** The fleet size (RATE_LIMIT_FLEET_SIZE, or the sidecars present in Redis if more); 0: unknown. */
  size: number
  /** Sidecars present at the last contact with Redis. */
  present: number
  /** RATE_LIMIT_FLEET_SIZE (0: unset; then nothing is spent while cut off). */
  declared: number
  /** Why Redis is not used, when it is not (never a credential). */
  problem: string | undefined
  /** Settling on its first contact: the sidecar has never had a tally it could trust (holds /readyz). */
  starting: boolean
  /** Whether Redis may evict budget keys, as read at the last connection (undefined: not yet read). */
  memory?: MemoryPolicy | undefined
}

export interface FleetStoreOptions {
  redis: RedisStore
  clock: Clock
  log: Logger
  metrics: Metrics
  rules: readonly Rule[]
  redisTimeoutMs: number
  /** RATE_LIMIT_FLEET_SIZE; 0 when unset. */
  fleetFloor: number
  timing?: Partial<FleetTiming>
  /** A cool-down met in Redis, or lengthened by it, is held here: the guard updates its gauge. */
  onCooldown: (scope: string) => void
  /** The ledger, when kept in STATE_DIR: with an earlier run's sends restored (ledger-file.ts). */
  ledger?: Ledger
  /** This sidecar's member id, kept in STATE_DIR; `resumed`: an earlier run's (Redis sees it come back, not a new one). */
  memberId?: string
  resumed?: boolean
}

export function createFleetStore (options: FleetStoreOptions) {
  const { redis, clock, log, metrics, rules, redisTimeoutMs, fleetFloor, onCooldown } = options
  const timing: FleetTiming = { ...DEFAULT_FLEET_TIMING, ...options.timing }
  const ledger = options.ledger ?? createLedger(clock)
  const cooldowns: Cooldowns = createCooldowns(clock)
  const member: Member = { id: options.memberId ?? newMemberId(), presenceTtlMs: timing.presenceTtlMs, fleetFloor, epoch: '', fresh: options.resumed !== true }
  // A member id kept from an earlier run names the sidecar; this run's sends get ids of their own.
  const nextId = createSendIds(options.memberId === undefined ? member.id : newMemberId())
  /** When this process started: an earlier run of this sidecar may have spent until then. */
  const bornAt = clock.now()
  /** Scopes whose cool-downs every heartbeat reads from Redis. */
  const scopes = [...rules.map((r) => r.id), UPSTREAM_SCOPE]
  const memory = createMemoryPolicyReport(log, metrics, redis.displayUrl)

  let state: FleetState = 'connecting'
  /** RATE_LIMIT_FLEET_SIZE, or the sidecars present at the last contact if more (a restart overlapping its earlier run). */
  let size = fleetFloor
  let present = 0
  /** Monotonic ms until which an epoch too young to trust holds every budget. */
  let graceUntil = -Infinity
  /** The grace of a first contact made at start: until then this sidecar has never had a tally to trust. */
  let firstGraceUntil: number | undefined
  /** Whether start() is making the first contact (a later one may find a fleet already serving). */
  let starting = true
  /** The sidecars present when more than RATE_LIMIT_FLEET_SIZE was last reported (0: not over). */
  let reportedOver = 0
  // The latest monotonic time at which Redis may still count this sidecar present (a script's
  // deadline + the presence TTL; at start, as if one was sent then): spending alone is safe one
  // window after it.
  let presenceBound = bornAt + redisTimeoutMs + timing.presenceTtlMs
  let problem: string | undefined
  let loggedProblem: string | undefined
  let closed = false
  let stopTimer: (() => void) | undefined
  let reasserting: Promise<void> | undefined

  const sending = (): void => { presenceBound = Math.max(presenceBound, clock.now() + redisTimeoutMs + timing.presenceTtlMs) }
  function learn (reply: { fleetSize: number, present: number }): void {
    size = Math.max(reply.fleetSize, fleetFloor)
    present = reply.present
    metrics.rateLimitFleetSize?.set(size)
    metrics.rateLimitFleetPresent?.set(present)
    reportFleetSize()
  }

  /** More sidecars present than declared (the guarantee's first assumption broken): logged once per change; /readyz and /status say it. */
  function reportFleetSize (): void {
    const over = fleetFloor > 0 && present > fleetFloor ? present : 0
    if (over === reportedOver) return
    reportedOver = over
    if (over > 0) {
      log.warn({ declared: fleetFloor, present },
        // Stryker disable next-line StringLiteral: log wording (the fields are tested)
        'more sidecars present than RATE_LIMIT_FLEET_SIZE declares: shares spent while cut off from redis may add up to more than a budget; set it to the most sidecars that run at once')
    } else {
      // Stryker disable next-line StringLiteral: log wording (the fields are tested)
      log.info({ declared: fleetFloor, present }, 'no more sidecars present than RATE_LIMIT_FLEET_SIZE declares')
    }
  }

  function setState (next: FleetState): void {
    state = next
    metrics.rateLimitBackend.set({ backend: 'memory' }, next === 'shared' ? 0 : 1)
    metrics.rateLimitBackend.set({ backend: 'redis' }, next === 'shared' ? 1 : 0)
    metrics.rateLimitDegraded?.set(next === 'shared' ? 0 : 1)
    metrics.rateLimitRedisUp?.set(next === 'shared' ? 1 : 0)
  }

  /** Logs a change of why Redis is not used, once per change. */
  function report (next: string | undefined, message: string): void {
    problem = next
    if (next === loggedProblem) return
    loggedProblem = next
    if (next !== undefined) log.warn({ redis: redis.displayUrl, reason: next }, message)
  }

  /** Redis failed or was late: from now on, this sidecar decides alone until Redis answers a PING. */
  function fallBack (err: unknown): void {
    if (closed) return
    const auth = redisAuthProblem(err) ?? redisAuthProblem(redis.lastError())
    const reason = auth ?? redis.describe(err)
    if (state === 'shared') {
      setState('degraded')
      metrics.rateLimitRedisFallbacks.inc()
      report(reason, 'rate-limit redis unreachable, too slow or refusing: each sidecar spends only its share of the budgets until it answers')
    } else if (auth !== undefined) {
      // Stryker disable next-line StringLiteral: log wording (the reason is the field)
      report(auth, 'rate-limit redis refused our credentials')
    } else {
      problem = reason
    }
    // Stryker disable next-line CallExpression: every caller already has the timer armed, a tick in flight that re-arms it, or a reassertion whose finally does
    schedule()
  }

  /** Share of a limit this sidecar may spend on its own: none without RATE_LIMIT_FLEET_SIZE. */
  const shareOf = (limit: Limit): number => fleetFloor <= 0 ? 0 : Math.floor(limit.count / size)

  /**
   * A take decided without Redis: the share, from one window after Redis last counted this
   * sidecar present. A refusal says to ask again within a heartbeat at most: Redis is probed
   * that often and may answer by then (a fleet of one knows exactly: its ledger is the tally).
   */
  function alone (scope: string, limits: readonly Limit[], id = nextId()): Take {
    probeSoon()
    // Redis is being told the ledger: a send admitted now could miss that snapshot.
    if (reasserting !== undefined) return { kind: 'degraded', ms: timing.heartbeatMs }
    const now = clock.now()
    if (fleetFloor === 1 && size === 1) {
      // A fleet of one, declared and never contradicted: its ledger is the whole tally, but
      // for what an earlier run of it sent.
      let ms = 0
      for (const limit of limits) ms = Math.max(ms, bornAt + limit.windowMs - now)
      if (ms <= 0) ms = ledger.wait(scope, limits)
      return ms > 0 ? { kind: 'degraded', ms } : admit(scope, limits, id)
    }
    let ms = 0
    for (const limit of limits) {
      // Share 0 (or no fleet size declared): nothing until Redis answers.
      if (shareOf(limit) === 0) return { kind: 'degraded', ms: timing.heartbeatMs }
      ms = Math.max(ms, presenceBound + limit.windowMs - now)
    }
    if (ms <= 0) ms = ledger.wait(scope, limits, shareOf)
    return ms > 0 ? { kind: 'degraded', ms: Math.min(ms, timing.heartbeatMs) } : admit(scope, limits, id)
  }

  /** What `alone` would still let each limit send (RateLimit fields): its share's room, none while it would refuse. */
  function aloneBudget (scope: string, limits: readonly Limit[]): Remaining[] {
    const now = clock.now()
    const one = fleetFloor === 1 && size === 1
    return ledgerBudget(ledger, scope, limits, (limit) => one ? limit.count : shareOf(limit)).map((remaining, i) => {
      const limit = limits[i] as Limit
      const ms = reasserting !== undefined || (!one && shareOf(limit) === 0)
        ? timing.heartbeatMs
        : (one ? bornAt : presenceBound) + limit.windowMs - now
      return ms > 0 ? { left: 0, resetMs: Math.max(ms, remaining.resetMs) } : remaining
    })
  }

  function admit (scope: string, limits: readonly Limit[], id = nextId()): Take {
    ledger.record(scope, limits, id)
    return { kind: 'ok', id }
  }

  async function shared (scope: string, limits: readonly Limit[]): Promise<Take> {
    const id = nextId()
    sending()
    let reply
    try {
      reply = await redis.take(member, scope, limits, id)
    } catch (err) {
      fallBack(err)
      // The same id: should the take have run in Redis after all, the send counts once.
      return alone(scope, limits, id)
    }
    switch (reply.code) {
      case 'ok':
        learn(reply)
        return admit(scope, limits, id)
      case 'cooldown':
        learn(reply)
        if (cooldowns.hold(scope, reply.ms)) onCooldown(scope)
        return { kind: 'cooldown', ms: reply.ms }
      case 'budget':
        learn(reply)
        return { kind: 'budget', ms: reply.ms }
      case 'gated':
        learn(reply)
        return { kind: 'degraded', ms: reply.ms, lost: true }
      case 'epoch':
        // Redis lost (or changed) its data: decide alone until the ledger is told again.
        setState('degraded')
        void reassert()
        return alone(scope, limits, id)
      default:
        fallBack(new Error(`no answer within ${redisTimeoutMs} ms`))
        return alone(scope, limits, id)
    }
  }

  function take (scope: string, limits: readonly Limit[]): Take | Promise<Take> {
    const cooling = cooldowns.left(scope)
    if (cooling > 0) return { kind: 'cooldown', ms: cooling }
    if (state !== 'shared') return limits.length === 0 ? NOTHING_TAKEN : alone(scope, limits)
    const now = clock.now()
    if (now < graceUntil && limits.length > 0) return { kind: 'degraded', ms: graceUntil - now, lost: true }
    return shared(scope, limits)
  }

  /** Every limit of every rule, with this sidecar's open sends: what Redis is told again. */
  function reassertion (): ReassertLimit[] {
    const open = new Map<string, OpenSend[]>()
    for (const send of ledger.open()) {
      const key = `${send.scope}\n${send.limit.text}`
      open.set(key, [...(open.get(key) ?? []), send])
    }
    return rules.flatMap((rule) => rule.limits.map((limit) => ({
      scope: rule.id,
      limit,
      sends: (open.get(`${rule.id}\n${limit.text}`) ?? []).map((s) => ({ id: s.id, ageMs: s.ageMs }))
    })))
  }

  /** Redis answers again (or for the first time): tell it the ledger, then share. Single-flight. */
  function reassert (): Promise<void> {
    reasserting ??= (async () => {
      try {
        await redis.readClock()
        sending()
        const reply = await redis.reassert(member, reassertion(), newMemberId())
        if (reply.late) throw new Error(`no answer within ${redisTimeoutMs} ms`)
        if (reply.lost) {
          log.warn({ redis: redis.displayUrl }, 'rate-limit redis lost its data: every budget is refused for one window of its limits, then shared again')
          metrics.rateLimitRedisDataLost?.inc()
        }
        member.epoch = reply.epoch
        member.fresh = false
        if (reply.epochAgeMs < timing.freshGraceMs) graceUntil = clock.now() + timing.freshGraceMs - reply.epochAgeMs
        if (starting) firstGraceUntil = graceUntil
        learn(reply)
        // Stryker disable next-line all: reported only (memory-policy.ts; test/budgets/eviction-policy.test.ts)
        void Promise.resolve().then(redis.memoryPolicy).then(memory.note, () => {})
        await shareCooldowns()
        const was = state
        setState('shared')
        // Stryker disable next-line StringLiteral: the message is only logged with a problem
        report(undefined, '')
        log.info({ redis: redis.displayUrl, fleetSize: size, present },
          // Stryker disable next-line EqualityOperator,StringLiteral: log wording
          was === 'degraded' ? 'rate-limit redis answers again: budgets are shared' : 'rate-limit budgets and cool-downs are shared in redis')
      } catch (err) {
        fallBack(err)
      } finally {
        reasserting = undefined
        schedule()
      }
    })()
    return reasserting
  }

  /** Cool-downs begun while Redis was away (or lost with its data) go to Redis, so the whole fleet keeps them. */
  async function shareCooldowns (): Promise<void> {
    const now = clock.now()
    await Promise.all(cooldowns.active().map(async ({ scope, endsAt }) => {
      await redis.coolDown(scope, { retryAfterMs: endsAt - now, baseMs: 0, maxMs: endsAt - now })
    }))
  }

  /** Shared: the presence heartbeat. Otherwise: a PING, and the reassertion when it answers. */
  async function tick (): Promise<void> {
    if (state === 'shared') {
      sending()
      try {
        const reply = await redis.heartbeat(member, scopes)
        if (reply.code === 'ok') {
          learn(reply)
          for (const [scope, ms] of reply.cooldowns) if (cooldowns.hold(scope, ms)) onCooldown(scope)
        } else if (reply.code === 'epoch') {
          setState('degraded')
          await reassert()
          return
        }
        // A late heartbeat changes nothing by itself: takes still go to Redis and are safe
        // while it answers them in time (a busy node must not cost a window of refusals).
      } catch (err) {
        // Likewise a timeout; a refused password or a lost connection is a change of state.
        if (!/timed out/i.test(redis.describe(err))) fallBack(err)
      }
    } else {
      await probe()
    }
    schedule()
  }

  let probing: Promise<void> | undefined
  /** Cut off: whether Redis answers a PING (no side effect) now; if it does, the ledger is told again. */
  function probe (): Promise<void> {
    probing ??= (async () => {
      try {
        if (await redis.ping()) await reassert()
      } finally {
        probing = undefined
      }
    })()
    return probing
  }
  /** A request decided alone (never while shared) asks Redis at once whether it answers again (one probe at a time). */
  function probeSoon (): void {
    if (!closed && reasserting === undefined) void probe()
  }

  function schedule (): void {
    if (closed || stopTimer !== undefined || reasserting !== undefined) return
    stopTimer = clock.setTimer(() => {
      stopTimer = undefined
      void tick()
    }, timing.heartbeatMs)
  }

  const store: Store = {
    take,
    refund (scope, limits, id) {
      ledger.refund(scope, limits, id)
      // Over-counting is safe: a refund Redis misses only holds a point it did not need to.
      if (state === 'shared') redis.refund(scope, limits, id).catch(() => {})
    },
    coolDown (scope: string, request: CooldownRequest): number {
      const ms = cooldowns.start(scope, request)
      if (state === 'shared') {
        redis.coolDown(scope, request).then((sharedMs) => { if (cooldowns.hold(scope, sharedMs)) onCooldown(scope) }, fallBack)
      }
      return ms
    }
  }

  return {
    ...store,
    cooldowns,
    displayUrl: redis.displayUrl,
    status (): FleetStatus {
      const settling = state === 'shared' && clock.now() < graceUntil
      return { state: settling ? 'settling' : state, size, present, declared: fleetFloor, problem, starting: settling && graceUntil === firstGraceUntil, memory: memory.current() }
    },
    /** Share of a limit while cut off from Redis (floor(limit / fleet size); none without RATE_LIMIT_FLEET_SIZE). */
    share: (limit: Limit): number => shareOf(limit),
    /**
     * What each limit of a scope may still send now, never more than the fleet has: the fleet's
     * tally while shared (read, nothing taken), else what this sidecar may spend alone.
     */
    async budget (scope: string, limits: readonly Limit[]): Promise<Remaining[]> {
      const cooling = cooldowns.left(scope)
      if (cooling > 0) return limits.map(() => ({ left: 0, resetMs: cooling }))
      if (state === 'shared' && clock.now() >= graceUntil) {
        // A failed read changes nothing here: the takes notice Redis failing.
        const peeked = await redis.peek(member.epoch, fleetFloor, scope, limits).catch(() => undefined)
        if (peeked !== undefined) return peeked
      }
      return aloneBudget(scope, limits)
    },
    /** Connects for at most the timeout (at least 1 s); never fails. */
    async start (): Promise<void> {
      redis.onState((up, err) => {
        if (up) {
          void reassert()
          return
        }
        if (state === 'shared') fallBack(err)
      })
      metrics.rateLimitFleetSize?.set(size)
      metrics.rateLimitFleetDeclared?.set(fleetFloor)
      const up = await redis.connect()
      if (up) await reassert()
      starting = false
      if (up) return
      const reason = redisAuthProblem(redis.lastError()) ?? 'not reachable'
      // Stryker disable next-line StringLiteral: log wording (the reason is the field)
      report(reason, 'rate-limit redis not reachable at start: each sidecar spends only its share of the budgets until it answers')
      schedule()
    },
    async close (): Promise<void> {
      closed = true
      stopTimer?.()
      // Shared, Redis holds every send: leave. Else lapse, and a newcomer holds the share back (redis-scripts.ts).
      if (state === 'shared' && reasserting === undefined) await redis.leave(member).catch(() => {})
      await redis.close()
    }
  }
}

export type FleetStore = ReturnType<typeof createFleetStore>
