// The fleet store's conversation with Redis, apart from the takes: the heartbeat while shared,
// the PING while cut off, the fall back to deciding alone, and the reassertion that tells
// Redis the ledger's open sends again. Part of the fleet's store (fleet-store.ts), loaded
// only with Redis.
import type { Rule } from '../config/rate-limit-rules.js'
import type { MemoryPolicy } from '../redis/memory-policy.js'
import type { Ledger, OpenSend } from './ledger.js'
import { newMemberId, UPSTREAM_SCOPE, type Cooldowns } from './store.js'
import { redisAuthProblem, type Member, type ReassertLimit } from './redis-backend.js'
import type { FleetStoreOptions } from './fleet-store.js'
import { renewed, type FleetReport, type FleetTiming, type FleetView } from './fleet-view.js'

export interface ConversationOptions extends Pick<FleetStoreOptions, 'redis' | 'clock' | 'log' | 'metrics' | 'rules' | 'redisTimeoutMs' | 'onCooldown'> {
  view: FleetView
  reporting: FleetReport
  timing: FleetTiming
  ledger: Ledger
  cooldowns: Cooldowns
  /** This sidecar in the fleet: the reassertion sets its epoch. */
  member: Member
  /** Told Redis's maxmemory-policy at each reassertion. */
  noteMemoryPolicy: (policy: MemoryPolicy) => void
  /** The sends a reassertion asked at `askedAt` puts in Redis's tally; those not left yet are placed from then (fleet-departures.ts). */
  placed: (sends: readonly OpenSend[], askedAt: number) => void
}

/** Every limit of every rule, with this sidecar's open sends: what Redis is told again. */
function reassertion (rules: readonly Rule[], ledger: Ledger): ReassertLimit[] {
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

/** Every send a reassertion tells (left or still waiting), as the ledger lists them. */
const sendsIn = (told: readonly ReassertLimit[]): OpenSend[] =>
  told.flatMap((l) => l.sends.map((send) => ({ scope: l.scope, limit: l.limit, ...send })))

/** Cool-downs begun while Redis was away (or lost with its data) go to Redis, so the whole fleet keeps them. */
async function shareCooldowns ({ redis, clock, cooldowns }: Pick<ConversationOptions, 'redis' | 'clock' | 'cooldowns'>): Promise<void> {
  const now = clock.now()
  await Promise.all(cooldowns.active().map(async ({ scope, endsAt }) => {
    await redis.coolDown(scope, { retryAfterMs: endsAt - now, baseMs: 0, maxMs: endsAt - now })
  }))
}

export function createConversation (options: ConversationOptions) {
  const { view, reporting: { setState, learn, reportProblem }, redis, clock, log, metrics, redisTimeoutMs, timing, cooldowns, member, onCooldown } = options
  /** Scopes whose cool-downs every heartbeat reads from Redis. */
  const scopes = [...options.rules.map((r) => r.id), UPSTREAM_SCOPE]
  let closed = false
  let stopTimer: (() => void) | undefined
  let probing: Promise<void> | undefined
  let askedAgain = false // the last heartbeat timed out and the next went at once

  /** A script that renews this sidecar's presence is about to be sent: Redis may count it present until its deadline + the TTL. */
  const extendPresenceBound = (): void => { view.presenceBound = Math.max(view.presenceBound, clock.now() + redisTimeoutMs + timing.presenceTtlMs) }

  /** Redis failed or was late: from now on, this sidecar decides alone until Redis answers a PING. */
  function fallBack (err: unknown): void {
    if (closed) return
    const auth = redisAuthProblem(err) ?? redisAuthProblem(redis.lastError())
    const reason = auth ?? redis.describe(err)
    if (view.state === 'shared') {
      setState('degraded')
      metrics.rateLimitRedisFallbacks.inc()
      reportProblem(reason, 'rate-limit redis unreachable, too slow or refusing: each sidecar spends only its share of the budgets until it answers')
    } else if (auth !== undefined) {
      // Stryker disable next-line StringLiteral: log wording (the reason is the field)
      reportProblem(auth, 'rate-limit redis refused our credentials')
    } else {
      view.problem = reason
    }
    // Stryker disable next-line CallExpression: every caller already has the timer armed, a tick in flight that re-arms it, or a reassertion whose finally does
    schedule()
  }

  /** Redis answers again (or for the first time; or without its data, `epochLost`): tell it the ledger, then share. Single-flight. */
  function reassert (epochLost = false): Promise<void> {
    view.epochLost ||= epochLost
    view.reasserting ??= (async () => {
      try {
        await redis.readClock()
        extendPresenceBound()
        const sent = { at: clock.now(), wallAt: clock.wallNow() }
        const told = reassertion(options.rules, options.ledger)
        // Sends decided alone and still waiting are Redis's once the script runs, whatever reply
        // comes back (a late one too): placed from now, before it is sent.
        options.placed(sendsIn(told), sent.at)
        const reply = await redis.reassert(member, told, newMemberId(), !view.everShared)
        if (reply.late) throw new Error(`no answer within ${redisTimeoutMs} ms`)
        renewed(view, sent)
        if (reply.lost) {
          log.warn({ redis: redis.displayUrl }, 'rate-limit redis lost its data: every budget is refused for one window of its limits, then shared again')
          metrics.rateLimitRedisDataLost?.inc()
        }
        member.epoch = reply.epoch
        view.everShared = true
        if (reply.epochAgeMs < timing.freshGraceMs) view.graceUntil = clock.now() + timing.freshGraceMs - reply.epochAgeMs
        if (view.starting) view.firstGraceUntil = view.graceUntil
        learn(reply)
        // Stryker disable next-line all: reported only (memory-policy.ts; test/quota/eviction-policy.test.ts)
        void Promise.resolve().then(redis.memoryPolicy).then(options.noteMemoryPolicy, () => {})
        await shareCooldowns(options)
        const was = view.state
        setState('shared')
        // Stryker disable next-line StringLiteral: the message is only logged with a problem
        reportProblem(undefined, '')
        log.info({ redis: redis.displayUrl, fleetSize: view.size, present: view.present },
          // Stryker disable next-line EqualityOperator,StringLiteral: log wording
          was === 'degraded' ? 'rate-limit redis answers again: budgets are shared' : 'rate-limit budgets and cool-downs are shared in redis')
      } catch (err) {
        fallBack(err)
      } finally {
        view.reasserting = undefined
        view.epochLost = false
        schedule()
      }
    })()
    return view.reasserting
  }

  /** Shared: the presence heartbeat. Otherwise: a PING, and the reassertion when it answers. */
  async function tick (): Promise<void> {
    if (view.state === 'shared') {
      extendPresenceBound()
      const sent = { at: clock.now(), wallAt: clock.wallNow() }
      try {
        const reply = await redis.heartbeat(member, scopes)
        if (reply.code === 'ok') {
          renewed(view, sent)
          learn(reply)
          for (const [scope, ms] of reply.cooldowns) if (cooldowns.adopt(scope, ms)) onCooldown(scope)
        } else if (reply.code === 'epoch') {
          setState('degraded')
          await reassert(true)
          return
        }
        // A late heartbeat changes nothing by itself: takes still go to Redis and are safe
        // while it answers them in time (a busy node must not cost a window of refusals).
        askedAgain = false
      } catch (err) {
        // Likewise a timeout; a refused password or a lost connection is a change of state.
        if (!/timed out/i.test(redis.describe(err))) fallBack(err)
        else if (!askedAgain) {
          // Again at once, once: unanswered, it refuses late sends (unansweredFor); a stall here is not a frozen Redis.
          askedAgain = true
          schedule(0)
          return
        }
      }
    } else {
      await probe()
    }
    schedule()
  }

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

  function schedule (ms = timing.heartbeatMs): void {
    if (closed || stopTimer !== undefined || view.reasserting !== undefined) return
    stopTimer = clock.setTimer(() => {
      stopTimer = undefined
      void tick()
    }, ms)
  }

  return {
    extendPresenceBound,
    fallBack,
    reassert,
    schedule,
    /** A request decided alone (never while shared) asks Redis at once whether it answers again (one probe at a time). */
    probeSoon (): void {
      if (!closed && view.reasserting === undefined) void probe()
    },
    /** Closing: nothing more is sent, scheduled or reported. */
    stop (): void {
      closed = true
      stopTimer?.()
    }
  }
}
