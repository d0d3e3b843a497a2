// The quota guard: admission and cool-down policy. Before each upstream send the request's
// rule (or the whole upstream) must not be cooling down and its budget must have room; after
// a gateway rate-limit answer, a cool-down starts. Where the tally lives (this sidecar alone,
// or the fleet through Redis with the local ledger as insurance) is the store's business.
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import type { RateLimitConfig } from '../config/rate-limits.js'
import type { Metrics } from '../metrics.js'
import { isRateLimitFault } from './apigee-fault.js'
import type { FleetStatus, FleetStore } from './fleet-store.js'
import { retryAfterMs, retryAfterSeconds } from './retry-after.js'
import { matchRule, type Limit, type Rule } from '../config/rate-limit-rules.js'
import { persistingStore } from './ledger-file.js'
import { createCooldowns, createLocalStore, UPSTREAM_SCOPE, type Cooldowns, type Store, type Take } from './store.js'
import { createLedger, type Ledger } from './ledger.js'
import { ledgerBudget, type Remaining } from './rate-limit-fields.js'

export { UPSTREAM_SCOPE }

/** A point taken for one send: given back with `refund` when nothing of the request was written. */
export interface Ticket {
  readonly scope: string
  readonly limits: readonly Limit[]
  readonly id: string
}

export type Refusal = 'budget' | 'cooldown' | 'degraded'

export type Verdict =
  | { readonly ok: true, readonly delayed: boolean, readonly ticket: Ticket | undefined }
  | { readonly ok: false, readonly reason: Refusal, readonly retryAfterMs: number, readonly scope: string } & RefusalCause
  /** The caller left while waiting for its budget: nothing was spent, nothing is sent. */
  | { readonly ok: false, readonly reason: 'gone' }

/** Why a refusal is not the usual spent budget or share: at most one is set, but `late` may come with `aloneEnded` (store.ts). */
interface RefusalCause {
  readonly lost?: true
  readonly aloneEnded?: true
  readonly unrecorded?: true
  /** Refused as it was leaving: it waited since the fleet's tally placed it, and Redis cannot be told (`leaving`). */
  readonly late?: true
}

function causeOf (degraded: Extract<Take, { kind: 'degraded' }>): RefusalCause {
  if (degraded.lost === true) return { lost: true }
  if (degraded.aloneEnded === true) return { aloneEnded: true }
  return degraded.unrecorded === true ? { unrecorded: true } : {}
}

/** The `reason` of rate_limited_total: the two refusals an operator must tell from a spent share have their own. */
const metricReason = (reason: Refusal, cause: RefusalCause): string =>
  cause.aloneEnded === true ? 'alone_ended' : cause.unrecorded === true ? 'unrecorded' : reason

/** The verdict when nothing is taken: nothing can stop a request, or its scope has no limits. */
const FREE: Verdict = Object.freeze({ ok: true, delayed: false, ticket: undefined })
const GONE: Verdict = Object.freeze({ ok: false, reason: 'gone' })
const NO_LIMITS: readonly Limit[] = Object.freeze([])

/** The caller's side of the exchange (its ServerResponse): it emits 'close' when the caller leaves. */
export interface Caller {
  readonly destroyed: boolean
  once: (event: 'close', listener: () => void) => unknown
  removeListener: (event: 'close', listener: () => void) => unknown
}

/** An upstream answer, as far as the guard looks at it. */
export interface Answer {
  statusCode: number
  headers: Record<string, string | string[] | undefined>
}

export interface RateLimitStatus {
  backend: 'memory' | 'redis'
  /** Budgets are shared through Redis but it cannot be used now: each sidecar spends only its share. */
  degraded: boolean
  /** `maxmemoryPolicy` as read at the last connection (null: refused or not yet read); `evicting`: budget keys may be evicted (null: unknown). */
  redis: { url: string, up: boolean, problem: string | null, maxmemoryPolicy?: string | null, evicting?: boolean | null } | null
  /** `declared`: RATE_LIMIT_FLEET_SIZE (0: unset); `overDeclared`: more present than declared (the guarantee's first assumption broken). */
  fleet: { size: number, present: number, declared: number, overDeclared: boolean } | null
  /** Cut off from Redis for longer than RATE_LIMIT_ALONE_MAX_MS: nothing budgeted is sent (every share 0) until it answers. */
  aloneEnded: boolean
  rules: Array<{ rule: string, limits: string[], share: number[] }>
  cooldowns: Array<{ rule: string, until: string }>
}

export interface GuardOptions {
  config: RateLimitConfig
  clock: Clock
  log: Logger
  metrics: Metrics
  /** The fleet's store, when RATE_LIMIT_REDIS_URL is set (app.ts loads it with a dynamic import). */
  fleet?: (onCooldown: (scope: string) => void) => FleetStore
  /** The ledger kept in STATE_DIR (the fleet store is given the same one), and how it is written before a send goes out. */
  durable?: { ledger: Ledger, save: () => Promise<void> }
}

/** More sidecars present in Redis than RATE_LIMIT_FLEET_SIZE declares (none declared: never). */
const overDeclared = (s: FleetStatus): boolean => s.declared > 0 && s.present > s.declared

const overDeclaredNote = (s: FleetStatus): string | undefined => overDeclared(s)
  ? `${s.present} sidecars present in redis, more than RATE_LIMIT_FLEET_SIZE=${s.declared}: set it to the most sidecars that run at once`
  : undefined

/** STATE_DIR's ledger cannot be written (`code`: why, an errno code): said, never the file's content. */
const ledgerNote = (code: string | undefined, fleet: boolean): string | undefined => code === undefined
  ? undefined
  : `STATE_DIR cannot record the rate-limit ledger (${code}): a restart would forget this sidecar's sends` +
    (fleet ? '; while redis does not answer, budgeted requests are refused' : '')

/** An evicting maxmemory-policy, for /readyz (still ready): budget keys may be dropped under memory pressure. */
const evictionNote = (s: FleetStatus): string | undefined => s.memory?.evicting === true
  ? `rate-limit redis evicts keys under memory pressure (maxmemory-policy ${String(s.memory.policy)}): ${String(s.memory.atRisk)}; set noeviction`
  : undefined

/** Why budgets are not shared in Redis although it is configured; undefined while they are. */
function sharingNote (s: FleetStatus, url: string): string | undefined {
  if (s.state === 'shared' || s.starting) return undefined
  if (s.state === 'settling') return `rate limits shared in redis ${url} in a moment: its tally is new, sidecars are still telling it their sends`
  const why = s.problem ?? (s.state === 'connecting' ? 'not reachable yet' : 'unreachable or too slow')
  const alone = s.aloneEnded
    ? 'cut off for longer than RATE_LIMIT_ALONE_MAX_MS, budgeted requests are refused until it answers'
    : s.declared === 0
      ? 'budgeted requests are refused until it answers (RATE_LIMIT_FLEET_SIZE is not set)'
      : `each sidecar spends only its share (fleet size ${s.size})`
  return `rate limits not shared: redis ${url} ${why}; ${alone}`
}

/** The cool-down gauge of each scope, reset when its cool-down ends; every scope's starts at 0. */
function createCooldownGauge (clock: Clock, metrics: Metrics, cooldowns: Cooldowns, scopes: readonly string[]) {
  const gaugeTimers = new Map<string, { endsAt: number, cancel: () => void }>()
  for (const scope of scopes) metrics.rateLimitCooldownUntil.set({ rule: scope }, 0)
  return {
    /** Puts the scope's cool-down under way (if any, and ending over 1 ms after the one shown: within that, the same one) on its gauge. */
    note (scope: string): void {
      const ms = cooldowns.left(scope)
      if (ms <= 0) return
      const endsAt = clock.now() + ms
      const current = gaugeTimers.get(scope)
      if (current !== undefined && current.endsAt >= endsAt - 1) return
      current?.cancel()
      metrics.rateLimitCooldownUntil.set({ rule: scope }, Math.round((clock.wallNow() + ms) / 1000))
      // A gauge timer that is replaced is cancelled above: the one that fires is the scope's latest.
      const cancel = clock.setTimer(() => {
        // Stryker disable next-line CallExpression: an ended entry's end has passed, so the next cool-down replaces it all the same
        gaugeTimers.delete(scope)
        metrics.rateLimitCooldownUntil.set({ rule: scope }, 0)
      }, ms)
      gaugeTimers.set(scope, { endsAt, cancel })
    },
    close (): void {
      for (const t of gaugeTimers.values()) t.cancel()
    }
  }
}

/** Waits `ms` unless the caller leaves first; true when it left. */
function sleep (clock: Clock, ms: number, caller: Caller): Promise<boolean> {
  // Stryker disable next-line BooleanLiteral: settle() checks caller.destroyed after every sleep, so false answers GONE too
  if (caller.destroyed) return Promise.resolve(true)
  return new Promise((resolve) => {
    const left = (): void => {
      cancel()
      // Stryker disable next-line BooleanLiteral: a response is destroyed before its 'close' (node's onServerResponseClose), and settle() checks that after every sleep
      resolve(true)
    }
    caller.once('close', left)
    const cancel = clock.setTimer(() => {
      caller.removeListener('close', left)
      resolve(false)
    }, ms)
  })
}

/** A local 429's message and Retry-After seconds. */
function describe (verdict: Extract<Verdict, { retryAfterMs: number }>): { message: string, retryAfterSeconds: number } {
  const seconds = retryAfterSeconds(verdict.retryAfterMs)
  const name = verdict.scope === UPSTREAM_SCOPE ? 'the upstream' : `rule ${verdict.scope}`
  return { message: `${refusedBecause(verdict, name)}; retry after ${seconds} s`, retryAfterSeconds: seconds }
}

function refusedBecause (verdict: Extract<Verdict, { retryAfterMs: number }>, name: string): string {
  if (verdict.reason === 'cooldown') return `${name} is in a cool-down after the gateway's rate-limit answer`
  if (verdict.late === true) {
    const why = verdict.aloneEnded === true
      ? 'cut off from rate-limit redis for longer than RATE_LIMIT_ALONE_MAX_MS'
      : verdict.reason === 'degraded' ? 'rate-limit redis stopped answering' : 'it waited over a minute'
    return `the request of ${name} waited to be sent until the tally could no longer count it where it was admitted (${why}), so it was not sent`
  }
  return verdict.reason === 'budget' ? `the budget of ${name} is spent` : withoutRedis(verdict, name)
}

/** Why a request was refused for want of Redis (reason `degraded`), by its cause. */
function withoutRedis (cause: RefusalCause, name: string): string {
  if (cause.lost === true) return `the fleet's tally of ${name} cannot be trusted yet (rate-limit redis is new or lost its data, and the sidecars' sends are not all in it): the budget is refused until they are, at most one window`
  if (cause.aloneEnded === true) return `the fleet's budget of ${name} cannot be checked: this sidecar has been cut off from rate-limit redis for longer than RATE_LIMIT_ALONE_MAX_MS and sends nothing budgeted until it answers`
  if (cause.unrecorded === true) return `STATE_DIR cannot record a send of ${name} decided without rate-limit redis (a restart would forget it): nothing is sent until STATE_DIR can be written or redis answers`
  return `the fleet's budget of ${name} cannot be checked (rate-limit redis not answering) and this sidecar's share is spent`
}

/** For /status: where budgets live, the fleet as last seen, each rule's share, the cool-downs under way. */
function rateLimitStatus (fleet: FleetStore | undefined, rules: readonly Rule[], cooldowns: Cooldowns, clock: Clock): RateLimitStatus {
  const now = clock.now()
  const wall = clock.wallNow()
  const fleetStatus: FleetStatus | undefined = fleet?.status()
  const shared = fleetStatus?.state === 'shared'
  return {
    backend: shared ? 'redis' : 'memory',
    degraded: fleetStatus !== undefined && !shared && fleetStatus.state !== 'settling',
    redis: fleet === undefined || fleetStatus === undefined
      ? null
      : { url: fleet.displayUrl, up: shared, problem: fleetStatus.problem ?? null, maxmemoryPolicy: fleetStatus.memory?.policy ?? null, evicting: fleetStatus.memory?.evicting ?? null },
    fleet: fleetStatus === undefined
      ? null
      : { size: fleetStatus.size, present: fleetStatus.present, declared: fleetStatus.declared, overDeclared: overDeclared(fleetStatus) },
    aloneEnded: fleetStatus?.aloneEnded === true,
    rules: rules.map((r) => ({
      rule: r.id,
      limits: r.limits.map((l) => l.text),
      share: r.limits.map((l) => fleetStatus?.aloneEnded === true ? 0 : fleet?.share(l) ?? l.count)
    })),
    cooldowns: cooldowns.active().map(({ scope, endsAt }) => ({ rule: scope, until: new Date(wall + (endsAt - now)).toISOString() }))
  }
}

export function createQuotaGuard ({ config, clock, log, metrics, fleet: createFleet, durable }: GuardOptions) {
  const { rules, maxWaitMs, cooldownMs, cooldownMaxMs } = config
  /** Whether anything can ever stop a request: otherwise admit() is a constant. */
  const active = rules.length > 0 || cooldownMs > 0
  const fleet = createFleet?.((scope) => { gauge.note(scope) })
  const cooldowns: Cooldowns = fleet?.cooldowns ?? createCooldowns(clock)
  const ledger = durable?.ledger ?? createLedger(clock)
  const base: Store = fleet ?? createLocalStore(clock, cooldowns, ledger)
  const persisting = durable === undefined ? undefined : persistingStore(base, durable.save, log)
  const store: Store = persisting ?? base
  const gauge = createCooldownGauge(clock, metrics, cooldowns, [...rules.map((r) => r.id), UPSTREAM_SCOPE])

  function refuse (scope: string, reason: Refusal, ms: number, cause: RefusalCause = {}): Verdict {
    metrics.rateLimited.inc({ rule: scope, reason: metricReason(reason, cause), action: 'refused' })
    // A cool-down refused for is on its gauge, whoever started it (no cool-down under way: nothing to note).
    gauge.note(scope)
    return { ok: false, reason, retryAfterMs: ms, scope, ...cause }
  }

  // The common path (no limits to take, e.g. cool-downs on and no rules) allocates nothing.
  function go (scope: string, limits: readonly Limit[], id: string, delayed: boolean): Verdict {
    if (id !== '') return { ok: true, delayed, ticket: { scope, limits, id } }
    return delayed ? { ok: true, delayed, ticket: undefined } : FREE
  }

  async function settle (scope: string, limits: readonly Limit[], first: Take, caller: Caller, maxWait: number): Promise<Verdict> {
    const startedAt = clock.now()
    let result = first
    for (;;) {
      if (result.kind === 'ok') {
        metrics.rateLimited.inc({ rule: scope, reason: 'budget', action: 'delayed' })
        return go(scope, limits, result.id, true)
      }
      if (result.kind === 'cooldown') return refuse(scope, 'cooldown', result.ms)
      // Over budget (the fleet's, or this sidecar's share): wait if it frees within
      // RATE_LIMIT_MAX_WAIT_MS (all waits counted), else refuse at once.
      const reason = result.kind
      if (result.ms > maxWait - (clock.now() - startedAt)) return refuse(scope, reason, result.ms, result.kind === 'degraded' ? causeOf(result) : {})
      if (await sleep(clock, result.ms, caller)) return GONE
      if (caller.destroyed) return GONE
      result = await store.take(scope, limits)
    }
  }

  /**
   * Whether the request may be sent now: synchronously on the common path (nothing stands
   * in the way, decided here), else a promise. One budget point per send; the ticket of an
   * admitted request goes back through `refund` if nothing of it is written upstream.
   * Without `wait` (a stored answer can stand in), a spent budget refuses at once.
   */
  function admit (rule: Rule | undefined, caller: Caller, { wait = true } = {}): Verdict | Promise<Verdict> {
    if (!active) return FREE
    const scope = rule?.id ?? UPSTREAM_SCOPE
    const limits = rule?.limits ?? NO_LIMITS
    const maxWait = wait ? maxWaitMs : 0
    const first = store.take(scope, limits)
    if (!(first instanceof Promise)) return first.kind === 'ok' ? go(scope, limits, first.id, false) : settle(scope, limits, first, caller, maxWait)
    return first.then((result) => result.kind === 'ok' ? go(scope, limits, result.id, false) : settle(scope, limits, result, caller, maxWait))
  }

  /**
   * The gateway answered a request of this rule (undefined: none) with a rate-limit answer:
   * that scope cools down for its Retry-After (capped; an HTTP-date is measured against the
   * answer's own Date, RFC 9110 §10.2.3), or the backoff.
   */
  function rateLimitAnswer (rule: Rule | undefined, headers: Answer['headers']): void {
    const scope = rule?.id ?? UPSTREAM_SCOPE
    metrics.rateLimitUpstreamAnswers.inc({ rule: scope })
    if (cooldownMs === 0) return
    const request = { retryAfterMs: retryAfterMs(headers['retry-after'], clock.wallNow(), headers.date), baseMs: cooldownMs, maxMs: cooldownMaxMs }
    const ms = store.coolDown(scope, request)
    gauge.note(scope)
    // Stryker disable next-line StringLiteral: the message's wording (its fields are tested)
    log.warn({ rule: scope, cooldownMs: ms, retryAfter: request.retryAfterMs !== undefined }, 'gateway rate-limit answer: cooling down')
  }

  return {
    /** Whether anything can stop a request (rules, or cool-downs on). */
    active,
    ruleFor: (method: string, target: string): Rule | undefined => matchRule(rules, method, target),
    admit,
    /** Gives a ticket's point back: nothing of its request was written to the upstream. */
    refund (ticket: Ticket | undefined): void {
      if (ticket !== undefined) store.refund(ticket.scope, ticket.limits, ticket.id)
    },
    /**
     * A ticket's request is about to be written: its send counts from now, not from its
     * admission. Or a refusal, when it must not go (the fleet's store says why: fleet-departures.ts);
     * its point is then given back with `refund` like any request not sent.
     */
    leaving (ticket: Ticket | undefined): Verdict | undefined {
      if (ticket === undefined) return undefined
      const stopped = store.leaving(ticket.scope, ticket.limits, ticket.id)
      return stopped === undefined ? undefined : refuse(ticket.scope, stopped.reason, stopped.ms, stopped.aloneEnded === true ? { late: true, aloneEnded: true } : { late: true })
    },
    /** The upstream's final answer began: a 429 starts a cool-down. */
    answered (rule: Rule | undefined, answer: Answer): void {
      if (answer.statusCode === 429) rateLimitAnswer(rule, answer.headers)
    },
    /** Whether an answer with this status is held back whole, to look for Apigee's rate-limit fault. */
    holds: (statusCode: number): boolean => statusCode === 500 && cooldownMs > 0,
    /** A held-back 500, whole: Apigee's rate-limit fault (JSON or XML, compressed or not) starts a cool-down. */
    held (rule: Rule | undefined, answer: Answer & { body: Buffer }): void {
      if (isRateLimitFault(answer.body, answer.headers['content-encoding'])) rateLimitAnswer(rule, answer.headers)
    },
    describe,
    /**
     * What each limit of a rule may still send now (nothing is taken): the fleet's tally while
     * Redis answers, else this sidecar's own share; on its own, its ledger.
     */
    budget (rule: Rule): Remaining[] | Promise<Remaining[]> {
      if (fleet !== undefined) return fleet.budget(rule.id, rule.limits)
      const cooling = cooldowns.left(rule.id)
      return cooling > 0 ? rule.limits.map(() => ({ left: 0, resetMs: cooling })) : ledgerBudget(ledger, rule.id, rule.limits, (l) => l.count)
    },
    backend: (): 'memory' | 'redis' => fleet?.status().state === 'shared' ? 'redis' : 'memory',
    /**
     * For /readyz: not ready while the first contact with Redis settles (a brand-new or
     * emptied Redis: its tally is trusted within RATE_LIMIT's fresh-epoch grace, a few seconds).
     * Held only on the first contact: later, the whole fleet would leave rotation at once.
     */
    readinessHold (): string | undefined {
      if (fleet?.status().starting !== true) return undefined
      return `rate-limit redis ${fleet.displayUrl} is new or lost its data: the fleet's tally is trusted in a moment, once the sidecars have told it their sends (budgeted requests are refused until then)`
    },
    /**
     * For /readyz: why limits are not shared although Redis is configured, more sidecars run than
     * declared, or STATE_DIR cannot record the ledger (still ready).
     */
    readinessNote (): string | undefined {
      const s = fleet?.status()
      const notes = fleet === undefined || s === undefined ? [] : [sharingNote(s, fleet.displayUrl), overDeclaredNote(s), evictionNote(s)]
      return [...notes, ledgerNote(persisting?.failing(), fleet !== undefined)].filter((text) => text !== undefined).join('; ') || undefined
    },
    status: (): RateLimitStatus => rateLimitStatus(fleet, rules, cooldowns, clock),
    /** Connects to Redis (when configured), for at most its timeout; never fails. */
    async start (): Promise<void> {
      await fleet?.start()
    },
    async close (): Promise<void> {
      gauge.close()
      await fleet?.close()
    }
  }
}

export type QuotaGuard = ReturnType<typeof createQuotaGuard>
