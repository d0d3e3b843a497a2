// The Redis side of the fleet's tally: the connection and the calls of the scripts in
// redis-scripts.ts. Loaded (through fleet-store.ts) with a dynamic import() only when
// RATE_LIMIT_REDIS_URL(_FILE) is set, so that ioredis is never loaded otherwise. The policy
// (when to trust Redis, what to do without it) is fleet-store.ts's; this file only runs
// commands and reports what they found.
// rate-limiter-flexible would not do: its consume() spends even when it refuses, its Redis
// windows are whole seconds, and a union of limiters spends on the limits that had room.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Clock } from '../clock.js'
import { openRedis } from '../redis/connection.js'
import { readMemoryPolicy, type MemoryPolicy } from '../redis/memory-policy.js'
import type { Limit } from '../config/rate-limit-rules.js'
import type { CooldownRequest } from './store.js'
import { COOL_DOWN, HEARTBEAT, LEAVING, PEEK, REASSERT, REFUND, TAKE } from './redis-scripts.js'

export { GHOST_KEEP_MS } from './redis-scripts.js'

/**
 * The prefix of every key: sidecars with one credential (token endpoint and client id)
 * share budgets and cool-downs; different credentials never do.
 */
export function redisKeyPrefix (authUrl: string, clientId: string): string {
  return `store-auth-proxy:${createHash('sha256').update(`${authUrl}\n${clientId}`).digest('hex').slice(0, 16)}:`
}

export interface RedisStoreOptions {
  /** The URL, credentials included: never logged or shown (displayUrl is). */
  url: string
  /** A command slower than this fails (and the sidecar goes on without Redis). */
  timeoutMs: number
  prefix: string
  clock: Clock
  /** The URL as it is now (its file re-read), asked before each reconnection: a rotated password is used from then on. */
  currentUrl?: () => string | undefined
}

/** Who this sidecar is in the fleet, as every presence-renewing script needs it. */
export interface Member {
  id: string
  presenceTtlMs: number
  /** RATE_LIMIT_FLEET_SIZE, 0 when unset. */
  fleetFloor: number
  /** The epoch this sidecar knows ('' before its first contact). */
  epoch: string
  /**
   * The smallest and largest RATE_LIMIT_FLEET_SIZE on record at its last script (set by this
   * store): told again after a data loss, as the sizes a sidecar cut off through it may have.
   */
  sizes?: { lo: number, hi: number }
  /**
   * RATE_LIMIT_ALONE_MAX_MS + the longest window of its rules: once its presence has lapsed for
   * this long, its sends alone are outside every window and Redis drops its entry (0 or unset:
   * never, as an earlier version's).
   */
  aloneSpanMs?: number
  /** Its ledger holds every send its earlier runs made alone (STATE_DIR, read whole): a restart's entry can end with it. */
  vouches?: boolean
}

export type TakeCode = 'ok' | 'cooldown' | 'budget' | 'late' | 'gated' | 'epoch'
const TAKE_CODES: readonly TakeCode[] = ['ok', 'cooldown', 'budget', 'late', 'gated', 'epoch']

export interface TakeReply { code: TakeCode, ms: number, fleetSize: number, present: number }
export interface ReassertReply { late: boolean, lost: boolean, fleetSize: number, present: number, epoch: string, epochAgeMs: number }
export interface HeartbeatReply {
  code: 'ok' | 'late' | 'epoch'
  fleetSize: number
  present: number
  /** Ms left of each asked scope's cool-down in Redis (none when 0 or less). */
  cooldowns: Map<string, number>
}

/** What one limit may still send now, and the ms until that grows. */
export interface PeekedLimit { left: number, resetMs: number }

/** A send to tell Redis again, per limit. */
export interface ReassertLimit {
  scope: string
  limit: Limit
  sends: Array<{ id: string, ageMs: number }>
}

type Reply = Array<number | string>
type ScriptClient = Redis & {
  sapTake: (numKeys: number, ...args: Array<string | number>) => Promise<Reply>
  sapReassert: (numKeys: number, ...args: Array<string | number>) => Promise<Reply>
  sapHeartbeat: (numKeys: number, ...args: Array<string | number>) => Promise<Reply>
  sapRefund: (numKeys: number, ...args: Array<string | number>) => Promise<number>
  sapLeaving: (numKeys: number, ...args: Array<string | number>) => Promise<unknown>
  sapPeek: (numKeys: number, ...args: Array<string | number>) => Promise<number[]>
  sapCoolDown: (numKeys: number, ...args: Array<string | number>) => Promise<number>
}

/** What a Redis error says about the configuration: its credentials refused (NOAUTH, WRONGPASS, an ACL). */
export function redisAuthProblem (err: unknown): string | undefined {
  const message = err instanceof Error ? err.message : String(err)
  const code = /\b(NOAUTH|WRONGPASS|NOPERM)\b/.exec(message)?.[1]
  if (code !== undefined) return `redis refused our credentials (${code}): check the user and password in the Redis URL`
  if (/invalid (username-)?password|Client sent AUTH, but no password is set/i.test(message)) {
    return 'redis refused our credentials: check the user and password in the Redis URL'
  }
  return undefined
}

/**
 * Redis's clock as last read (ms) and when (local monotonic ms, when the answer came back: so
 * Redis's time now is at least redisMs + (clock.now() - localMs)). Deadlines are written in
 * Redis's time from it: never later than the true send time + timeoutMs. And how long the
 * oldest script sent since Redis last answered one has waited.
 */
export function redisTiming (clock: Clock, timeoutMs: number) {
  let calibration: { redisMs: number, localMs: number } | undefined
  // Every script not known answered, oldest first (Redis answers one connection in
  // order: an answer to one says every one sent before it was answered too).
  const pending: Array<{ seq: number, at: number }> = []
  let seq = 0
  return {
    calibrate: (redisMs: number): void => { calibration = { redisMs, localMs: clock.now() } },
    answered: async <T>(reply: Promise<T>): Promise<T> => {
      const mine = ++seq
      pending.push({ seq: mine, at: clock.now() })
      const value = await reply
      while ((pending[0]?.seq ?? Infinity) <= mine) pending.shift()
      return value
    },
    deadline: (): number => calibration === undefined ? -1 : Math.floor(calibration.redisMs + (clock.now() - calibration.localMs)) + timeoutMs,
    unansweredFor: (): number => pending.length === 0 ? 0 : clock.now() - (pending[0]?.at ?? 0)
  }
}

export function createRedisStore ({ url, timeoutMs, prefix, clock, currentUrl }: RedisStoreOptions) {
  const connection = openRedis({ url, timeoutMs, currentUrl })
  const { displayUrl } = connection
  const client = connection.client as ScriptClient
  client.defineCommand('sapTake', { lua: TAKE })
  client.defineCommand('sapReassert', { lua: REASSERT })
  client.defineCommand('sapHeartbeat', { lua: HEARTBEAT })
  client.defineCommand('sapRefund', { lua: REFUND })
  client.defineCommand('sapLeaving', { lua: LEAVING })
  client.defineCommand('sapCoolDown', { lua: COOL_DOWN })
  client.defineCommand('sapPeek', { lua: PEEK })

  let listener: ((up: boolean, err?: unknown) => void) | undefined
  let lastError: unknown
  // ioredis prints unhandled 'error' events to the console; the fleet store logs state changes itself.
  client.on('error', (err) => { lastError = err })
  client.on('ready', () => { listener?.(true) })
  client.on('close', () => { listener?.(false, lastError ?? new Error('the connection closed')) })

  const { calibrate, answered, deadline, unansweredFor } = redisTiming(clock, timeoutMs)

  const key = (scope: string, suffix: string): string => `${prefix}${suffix}:${scope}`
  const fleetKeys = [`${prefix}epoch`, `${prefix}members`, `${prefix}lapsed`, `${prefix}released`, `${prefix}tally`, `${prefix}floors`, `${prefix}released-floors`, `${prefix}held-sizes`, `${prefix}alone-spans`]
  const logKey = (scope: string, limit: Limit): string => key(scope, `log:${limit.text}`)
  // Stryker disable next-line StringLiteral: one gate for a scope's limits holds for its longest window, and a take waits for the longest gate of its limits anyway
  const gateKey = (scope: string, limit: Limit): string => key(scope, `gate:${limit.text}`)
  const memberArgs = (m: Member): Array<string | number> => [deadline(), m.id, m.presenceTtlMs, m.fleetFloor, m.epoch]
  /** The sizes a script's reply told from index `i` (smallest, largest), kept on the member. */
  const noteSizes = (m: Member, reply: Reply, i: number): void => {
    if (reply[i + 1] !== undefined) m.sizes = { lo: Number(reply[i]), hi: Number(reply[i + 1]) }
  }

  return {
    displayUrl,
    /**
     * Ms the oldest script sent since Redis last answered one (a take, a heartbeat, a
     * reassertion) has waited: 0 when none waits. A stalled event loop has sent nothing new,
     * so it does not look like a frozen Redis.
     */
    unansweredFor,
    /** Reads Redis's clock (no side effect): needed once before any script with a deadline. */
    async readClock (): Promise<void> {
      const [seconds, micros] = await client.time()
      calibrate(Number(seconds) * 1000 + Math.floor(Number(micros) / 1000))
    },
    async take (member: Member, scope: string, limits: readonly Limit[], sendId: string): Promise<TakeReply> {
      const keys = [...fleetKeys, key(scope, 'cooldown'), ...limits.flatMap((l) => [logKey(scope, l), gateKey(scope, l)])]
      const args = [...memberArgs(member), sendId, ...limits.flatMap((l) => [l.count, l.windowMs]), timeoutMs, member.aloneSpanMs ?? 0]
      const reply = await answered(client.sapTake(keys.length, ...keys, ...args))
      calibrate(Number(reply[4]))
      noteSizes(member, reply, 5)
      return { code: TAKE_CODES[Number(reply[0])] ?? 'late', ms: Number(reply[1]), fleetSize: Number(reply[2]), present: Number(reply[3]) }
    },
    /** `newRun`: this process's first contact (a restart keeping its member id is a new run). */
    async reassert (member: Member, limits: readonly ReassertLimit[], newEpoch: string, newRun = false): Promise<ReassertReply> {
      const keys = [...fleetKeys, ...limits.flatMap((l) => [logKey(l.scope, l.limit), gateKey(l.scope, l.limit)])]
      const args = [...memberArgs(member), newEpoch, newRun ? (member.vouches === true ? 2 : 1) : 0,
        ...limits.flatMap((l) => [l.limit.windowMs, l.sends.length, ...l.sends.flatMap((s) => [s.id, Math.max(0, Math.round(s.ageMs))])]),
        member.sizes?.lo ?? 0, member.sizes?.hi ?? 0, timeoutMs, member.aloneSpanMs ?? 0]
      const reply = await answered(client.sapReassert(keys.length, ...keys, ...args))
      const now = Number(reply[4])
      calibrate(now)
      noteSizes(member, reply, 6)
      const epoch = String(reply[5])
      const createdAt = Number(epoch.slice(epoch.lastIndexOf(':') + 1))
      return {
        late: Number(reply[0]) === 1,
        lost: Number(reply[1]) === 1,
        fleetSize: Number(reply[2]),
        present: Number(reply[3]),
        epoch,
        epochAgeMs: Number.isFinite(createdAt) ? now - createdAt : Infinity
      }
    },
    async heartbeat (member: Member, scopes: readonly string[]): Promise<HeartbeatReply> {
      const keys = [...fleetKeys, ...scopes.map((scope) => key(scope, 'cooldown'))]
      const reply = await answered(client.sapHeartbeat(keys.length, ...keys, ...memberArgs(member), timeoutMs, member.aloneSpanMs ?? 0))
      calibrate(Number(reply[3]))
      noteSizes(member, reply, 4 + scopes.length)
      const code = Number(reply[0])
      // Stryker disable next-line UnaryOperator: the script answers one PTTL per scope asked, so the default is never read
      const cooldowns = new Map(scopes.map((scope, i) => [scope, Number(reply[4 + i] ?? -2)]))
      return { code: code === 0 ? 'ok' : code === 5 ? 'epoch' : 'late', fleetSize: Number(reply[1]), present: Number(reply[2]), cooldowns }
    },
    /** What each limit may still send now (RateLimit fields); undefined when the epoch is not `epoch`. */
    /**
     * `presenceTtlMs` and `heartbeatMs`: the fleet's (fleet-store.ts DEFAULT_FLEET_TIMING's in
     * production): a release PEEK foresees starts at the next presence, a heartbeat away at most.
     */
    async peek (epoch: string, floor: number, scope: string, limits: readonly Limit[], presenceTtlMs = 3_000, heartbeatMs = 1_000): Promise<PeekedLimit[] | undefined> {
      const keys = [...fleetKeys, key(scope, 'cooldown'), ...limits.flatMap((l) => [logKey(scope, l), gateKey(scope, l)])]
      const reply = await client.sapPeek(keys.length, ...keys, floor, epoch, ...limits.flatMap((l) => [l.count, l.windowMs]), presenceTtlMs, timeoutMs, heartbeatMs)
      if (Number(reply[0]) !== 0) return undefined
      return limits.map((_, i) => ({ left: Number(reply[2 + 2 * i]), resetMs: Number(reply[3 + 2 * i]) }))
    },
    /** A sidecar stopping while shared: every send of it is in Redis, so it leaves without a trace (no lapse to remember). */
    async leave (member: Member): Promise<void> {
      await client.zrem(fleetKeys[1] as string, member.id)
    },
    async refund (scope: string, limits: readonly Limit[], sendId: string): Promise<void> {
      if (limits.length === 0) return
      const keys = [...fleetKeys, ...limits.map((l) => logKey(scope, l))]
      await client.sapRefund(keys.length, ...keys, sendId)
    },
    /**
     * The sends' requests are being written, or still wait (renewed): each log of their rule has
     * them from Redis's now (never earlier), again if a wait past its window dropped one.
     */
    async leaving (scope: string, limits: readonly Limit[], ...sendIds: string[]): Promise<void> {
      if (limits.length === 0 || sendIds.length === 0) return
      const keys = [...fleetKeys, ...limits.map((l) => logKey(scope, l))]
      await client.sapLeaving(keys.length, ...keys, ...sendIds)
    },
    async coolDown (scope: string, request: CooldownRequest): Promise<number> {
      const cooldown = key(scope, 'cooldown')
      // Stryker disable next-line StringLiteral: the backoff key is read by this script only; any name under the prefix and scope keeps it apart
      const backoff = key(scope, 'backoff')
      return Number(await client.sapCoolDown(2, cooldown, backoff,
        request.retryAfterMs === undefined ? -1 : Math.round(request.retryAfterMs), request.baseMs, request.maxMs))
    },
    /** maxmemory and its policy (CONFIG GET; unknown when refused): whether budget keys may be evicted. */
    memoryPolicy: async (): Promise<MemoryPolicy> => await readMemoryPolicy(client),
    /** Reports the connection coming up (ready) or going down. */
    onState (fn: (up: boolean, err?: unknown) => void): void { listener = fn },
    /** The first connection, bounded by the command timeout (at least 1 s); false if not up by then. */
    connect: connection.connect,
    /** Whether Redis answers within the timeout now (PING: no side effect). */
    async ping (): Promise<boolean> {
      if (client.status !== 'ready') return false
      try {
        await client.ping()
        return true
      } catch {
        return false
      }
    },
    /** The last connection error (ioredis reconnects by itself; this says why it had to). */
    lastError: (): unknown => lastError,
    /** A failure's reason for the log: never the URL's credentials. */
    describe: connection.describe,
    async close (): Promise<void> {
      listener = undefined
      client.disconnect()
    }
  }
}

export type RedisStore = ReturnType<typeof createRedisStore>
