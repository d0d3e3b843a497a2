// The fleet's store: budgets shared through Redis by every sidecar on one credential, with
// this sidecar's own ledger as the insurance (compare rate-limiter-flexible's
// insuranceLimiter). Callers above it never branch on which answered. The guarantee it keeps
// (docs/quota-guard.md): in any window of a limit, the fleet sends at most the limit — with
// Redis up, slow, partitioned, restarted empty or gone — as long as RATE_LIMIT_FLEET_SIZE
// covers every sidecar running at once.
//
// How, in short:
// - Shared: each take is one Redis script on sliding logs; room is kept for the share
//   (limit / fleet size) of every sidecar out of Redis's sight: absent, or lapsed and perhaps
//   spending on its own, or stopped within the last window (redis-scripts.ts).
// - Degraded (a take failed or was late): this sidecar asks Redis nothing more until it
//   answers a PING again, and spends only its share of RATE_LIMIT_FLEET_SIZE, or of the
//   largest size declared in Redis if more (fleet-alone.ts; none without
//   it: a size seen in Redis may lag a sidecar joining), only once Redis has counted this
//   process present (so Redis knows to hold its share), and only from one window after the
//   last moment Redis could still have counted it present (every admission in such a window
//   kept its share free). Fleet size 1, declared: the whole budget, one window after start.
// - Back: one script tells Redis the ledger's open sends again (idempotent ids) and registers
//   the sidecar present, atomically; a lost epoch gates every limit for one window.
//
// Its parts: fleet-view.ts (the state they share, and how its changes are reported),
// fleet-alone.ts (the decisions made without Redis), fleet-conversation.ts (the heartbeat,
// the PING, the fall back and the reassertion). The takes and the Store's API are here.
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { Metrics } from '../metrics.js'
import { createLedger, type Ledger } from './ledger.js'
import type { Remaining } from './rate-limit-fields.js'
import { createMemoryPolicyReport, type MemoryPolicy } from '../redis/memory-policy.js'
import { redisAuthProblem, type Member, type RedisStore } from './redis-backend.js'
import type { Limit, Rule } from '../config/rate-limit-rules.js'
import { createCooldowns, createSendIds, newMemberId, NOTHING_TAKEN, type CooldownRequest, type Cooldowns, type Store, type Take } from './store.js'
import { createFleetReport, createFleetView, renewed, type FleetState, type FleetTiming } from './fleet-view.js'
import { createDepartures } from './fleet-departures.js'
import { admit, aloneSpanMs, createAlone } from './fleet-alone.js'
import { createConversation } from './fleet-conversation.js'

export type { FleetState, FleetTiming }

export const DEFAULT_FLEET_TIMING: FleetTiming = Object.freeze({ heartbeatMs: 1_000, presenceTtlMs: 3_000, freshGraceMs: 3_000 })

/** As reported: `settling` is shared but within the grace of a young epoch (budgets still refused). */
export type FleetReportedState = FleetState | 'settling'

export interface FleetStatus {
  state: FleetReportedState
  /** The size shares divide by: RATE_LIMIT_FLEET_SIZE, or the sidecars present or the largest size declared in Redis if more; 0: unknown. */
  size: number
  /** Sidecars present at the last contact with Redis. */
  present: number
  /** RATE_LIMIT_FLEET_SIZE (0: unset; then nothing is spent while cut off). */
  declared: number
  /** Why Redis is not used, when it is not (never a credential). */
  problem: string | undefined
  /** Settling on its first contact: the sidecar has never had a tally it could trust (holds /readyz). */
  starting: boolean
  /** Cut off for longer than RATE_LIMIT_ALONE_MAX_MS: nothing budgeted is sent until Redis answers. */
  aloneEnded: boolean
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
  /** The earlier run's member id, kept in STATE_DIR: Redis sees the same sidecar come back. */
  memberId?: string
  /** The ledger restored holds every send the earlier runs made alone (every one of them read): their lapse can end with this run. */
  ledgerWhole?: boolean
  /** RATE_LIMIT_ALONE_MAX_MS: cut off for longer, nothing is spent alone (unset: no bound, as an earlier version). */
  aloneMaxMs?: number
}

/** This sidecar as Redis knows it: what it tells with every script. */
function memberOf (options: FleetStoreOptions, timing: FleetTiming): Member {
  return {
    id: options.memberId ?? newMemberId(),
    presenceTtlMs: timing.presenceTtlMs,
    fleetFloor: options.fleetFloor,
    epoch: '',
    aloneSpanMs: aloneSpanMs(options.aloneMaxMs, options.rules),
    vouches: options.memberId !== undefined && options.ledgerWhole === true
  }
}

export function createFleetStore (options: FleetStoreOptions) {
  const { redis, clock, log, metrics, rules, redisTimeoutMs, fleetFloor, onCooldown } = options
  const timing: FleetTiming = { ...DEFAULT_FLEET_TIMING, ...options.timing }
  const ledger = options.ledger ?? createLedger(clock)
  const cooldowns: Cooldowns = createCooldowns(clock)
  const member = memberOf(options, timing)
  // A member id kept from an earlier run names the sidecar; this run's sends get ids of their own.
  const nextId = createSendIds(options.memberId === undefined ? member.id : newMemberId())
  /** When this process started: an earlier run of this sidecar may have spent until then. */
  const bornAt = clock.now()
  const memory = createMemoryPolicyReport(log, metrics, redis.displayUrl)
  // Stryker disable next-line ArithmeticOperator: a smaller start is never read: the first reassertion extends the bound from its now (≥ bornAt) before Redis counts it present
  const view = createFleetView(fleetFloor, bornAt + redisTimeoutMs + timing.presenceTtlMs)
  const reporting = createFleetReport({ view, log, metrics, fleetFloor, displayUrl: redis.displayUrl, largestDeclared: () => member.sizes?.hi ?? 0 })
  const { setState, learn } = reporting
  // From admission until its request is written or given up (fleet-departures.ts).
  // aloneEnded is asked only as a send leaves: alone is made below, after the conversation it probes through.
  const departures = createDepartures({ clock, ledger, redis, view, retryMs: timing.heartbeatMs, quietMs: redisTimeoutMs, aloneEnded: () => alone.endedNow() })
  const conversation = createConversation({
    view, reporting, redis, clock, log, metrics, rules, redisTimeoutMs, timing, ledger, cooldowns, member, noteMemoryPolicy: memory.note, onCooldown, placed: departures.reasserted
  })
  const { fallBack, reassert, schedule } = conversation
  const alone = createAlone({ view, clock, ledger, timing, fleetFloor, bornAt, probeSoon: conversation.probeSoon, spenders: reporting.spenders, aloneMaxMs: options.aloneMaxMs })

  async function shared (scope: string, limits: readonly Limit[]): Promise<Take> {
    // This sidecar's own sends that have not left yet count as leaving now: Redis may have
    // them at their admission, or have dropped them a window after it.
    const own = ledger.wait(scope, limits)
    if (own > 0) return { kind: 'budget', ms: own }
    const id = nextId()
    conversation.extendPresenceBound()
    // Redis times the send no earlier than this: how late it leaves is measured from here, a
    // slow reply included (RETIME_AFTER_MS).
    const sent = { at: clock.now(), wallAt: clock.wallNow() }
    let reply
    try {
      reply = await redis.take(member, scope, limits, id)
    } catch (err) {
      fallBack(err)
      // The same id: should the take have run in Redis after all, the send counts once.
      return alone.take(scope, limits, id)
    }
    if (reply.code !== 'late' && reply.code !== 'epoch') renewed(view, sent)
    switch (reply.code) {
      case 'ok':
        learn(reply)
        // A request of no rule (cool-downs only) has nothing Redis could count early.
        if (limits.length > 0) departures.placedBy(id, sent.at)
        return admit(ledger, scope, limits, id, sent.at)
      case 'cooldown':
        learn(reply)
        if (cooldowns.adopt(scope, reply.ms)) onCooldown(scope)
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
        void reassert(true)
        return alone.take(scope, limits, id)
      default:
        fallBack(new Error(`no answer within ${redisTimeoutMs} ms`))
        return alone.take(scope, limits, id)
    }
  }

  function take (scope: string, limits: readonly Limit[]): Take | Promise<Take> {
    const cooling = cooldowns.left(scope)
    if (cooling > 0) return { kind: 'cooldown', ms: cooling }
    if (view.state !== 'shared') return limits.length === 0 ? NOTHING_TAKEN : alone.take(scope, limits, nextId())
    const now = clock.now()
    if (now < view.graceUntil && limits.length > 0) return { kind: 'degraded', ms: view.graceUntil - now, lost: true }
    return shared(scope, limits)
  }

  const store: Store = {
    take: departures.renewing(take),
    refund: departures.refund,
    leaving: departures.leaving,
    coolDown (scope: string, request: CooldownRequest): number {
      const ms = cooldowns.start(scope, request)
      if (view.state === 'shared') {
        redis.coolDown(scope, request).then((sharedMs) => { if (cooldowns.adopt(scope, sharedMs)) onCooldown(scope) }, fallBack)
      }
      return ms
    }
  }

  return {
    ...store,
    cooldowns,
    displayUrl: redis.displayUrl,
    status (): FleetStatus {
      const { state, present, problem, graceUntil } = view
      const settling = state === 'shared' && clock.now() < graceUntil
      return { state: settling ? 'settling' : state, size: reporting.spenders(), present, declared: fleetFloor, problem, starting: settling && graceUntil === view.firstGraceUntil, aloneEnded: alone.endedNow(), memory: memory.current() }
    },
    /** Share of a limit while cut off from Redis (floor(limit / the fleet size or the largest declared); none without RATE_LIMIT_FLEET_SIZE). */
    share: (limit: Limit): number => alone.shareOf(limit),
    /**
     * What each limit of a scope may still send now, never more than the fleet has: the fleet's
     * tally while shared (read, nothing taken), else what this sidecar may spend alone.
     */
    async budget (scope: string, limits: readonly Limit[]): Promise<Remaining[]> {
      const cooling = cooldowns.left(scope)
      if (cooling > 0) return limits.map(() => ({ left: 0, resetMs: cooling }))
      if (view.state === 'shared') {
        // Within a young tally's grace every take is refused (take above): so say the fields.
        const grace = view.graceUntil - clock.now()
        if (grace > 0) return limits.map(() => ({ left: 0, resetMs: grace }))
        // A failed read changes nothing here: the takes notice Redis failing.
        const peeked = await redis.peek(member.epoch, fleetFloor, scope, limits, member.presenceTtlMs, timing.heartbeatMs).catch(() => undefined)
        if (peeked !== undefined) return peeked
      }
      return alone.budget(scope, limits)
    },
    /** Connects for at most the timeout (at least 1 s); never fails. */
    async start (): Promise<void> {
      redis.onState((up, err) => {
        if (up) {
          void reassert()
          return
        }
        if (view.state === 'shared') fallBack(err)
      })
      metrics.rateLimitFleetSize?.set(view.size)
      metrics.rateLimitFleetDeclared?.set(fleetFloor)
      const up = await redis.connect()
      if (up) await reassert()
      view.starting = false
      if (up) return
      const reason = redisAuthProblem(redis.lastError()) ?? 'not reachable'
      // Stryker disable next-line StringLiteral: log wording (the reason is the field)
      reporting.reportProblem(reason, 'rate-limit redis not reachable at start: budgets are refused until it answers (no one would hold back what this sidecar spent alone)')
      schedule()
    },
    async close (): Promise<void> {
      conversation.stop()
      departures.close()
      // Shared, Redis holds every send: leave. Else lapse: its share stays held (redis-scripts.ts).
      if (view.state === 'shared' && view.reasserting === undefined) await redis.leave(member).catch(() => {})
      await redis.close()
    }
  }
}

export type FleetStore = ReturnType<typeof createFleetStore>
