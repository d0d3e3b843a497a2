// The Redis side of the fleet's tally: the scripts and the connection. Loaded (through
// fleet-store.ts) with a dynamic import() only when RATE_LIMIT_REDIS_URL(_FILE) is set, so
// that ioredis is never loaded otherwise. The policy (when to trust Redis, what to do without
// it) is fleet-store.ts's; this file only runs commands and reports what they found.
//
// Each limit is a sliding log: a sorted set of send ids scored by Redis's own clock (TIME),
// so "at most N in any W" holds across the fleet whatever the sidecars' clocks say. Every
// script is atomic: a take adds its send id to every limit of the rule, or to none.
// rate-limiter-flexible would not do: its consume() spends even when it refuses, its Redis
// windows are whole seconds, and a union of limiters spends on the limits that had room.
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Clock } from '../clock.js'
import { openRedis } from '../redis/connection.js'
import { readMemoryPolicy, type MemoryPolicy } from '../redis/memory-policy.js'
import type { Limit } from '../config/rate-limit-rules.js'
import type { CooldownRequest } from './store.js'

// Shared by the scripts: Redis's clock in ms; the caller's deadline (a command that waited in
// a frozen or slow Redis past it does nothing: its sender already gave up on it); the fleet's
// presence (each sidecar renews a member entry that lapses after a TTL). The fleet size the
// formulas use is RATE_LIMIT_FLEET_SIZE, or the sidecars present now if more.
const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function late (deadline) return deadline >= 0 and now > deadline end
local function presence (membersKey, member, ttl, floor)
  redis.call('ZREMRANGEBYSCORE', membersKey, '-inf', now)
  redis.call('ZADD', membersKey, now + ttl, member)
  redis.call('PEXPIRE', membersKey, ttl)
  local present = redis.call('ZCARD', membersKey)
  return present, math.max(present, floor)
end
`

// KEYS: epoch, members, cooldown, then (log, gate) per limit.
// ARGV: deadline, member, ttl, floor, epoch expected, send id, then (count, window ms) per limit.
// Returns {code, ms, fleet size, present, now}: 0 taken, 1 cooling down, 2 a limit is spent
// (all have room in ms), 3 late (nothing done), 4 a limit is gated after a data loss,
// 5 the epoch is not the one expected (Redis lost or changed its data; nothing done).
// A limit keeps room for the share of every sidecar not present (it may be spending its
// share on its own): used + 1 + (size - present) * floor(count / size) <= count.
const TAKE = PRELUDE + `
if late(tonumber(ARGV[1])) then return {3, 0, 0, 0, now} end
if redis.call('GET', KEYS[1]) ~= ARGV[5] then return {5, 0, 0, 0, now} end
local present, size = presence(KEYS[2], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
local cd = redis.call('PTTL', KEYS[3])
if cd > 0 then return {1, cd, size, present, now} end
local wait, gated = 0, 0
for i = 4, #KEYS, 2 do
  local g = redis.call('PTTL', KEYS[i + 1])
  if g > gated then gated = g end
  local count, window = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local used = redis.call('ZCARD', KEYS[i])
  local room = count
  if size > present then room = count - (size - present) * math.floor(count / size) end
  if used + 1 > room then
    local w = window
    local leaving = used - room + 1
    if room > 0 then
      local e = redis.call('ZRANGE', KEYS[i], leaving - 1, leaving - 1, 'WITHSCORES')
      w = tonumber(e[2]) + window - now
    end
    if w > wait then wait = w end
  end
end
if gated > 0 then return {4, gated, size, present, now} end
if wait > 0 then return {2, wait, size, present, now} end
for i = 4, #KEYS, 2 do
  redis.call('ZADD', KEYS[i], now, ARGV[6])
  redis.call('PEXPIRE', KEYS[i], ARGV[i + 4])
end
return {0, 0, size, present, now}
`

// KEYS: epoch, members, then (log, gate) per limit of every rule.
// ARGV: deadline, member, ttl, floor, epoch expected ('' if none yet), new epoch id, then per
// limit: window ms, n, then n × (send id, age ms).
// Tells Redis this sidecar's open sends again (ZADD GT: the same id never counts twice), and
// registers it present, in one step. If the epoch is missing or another than expected, Redis
// lost its data: every limit is gated for one window (counts in it cannot be trusted).
// Returns {late (1/0), lost (1/0), fleet size, present, now, epoch}.
const REASSERT = PRELUDE + `
if late(tonumber(ARGV[1])) then return {1, 0, 0, 0, now, ''} end
local epoch = redis.call('GET', KEYS[1])
local lost = 0
if not epoch then
  epoch = ARGV[6] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
  if ARGV[5] ~= '' then lost = 1 end
elseif ARGV[5] ~= '' and epoch ~= ARGV[5] then
  lost = 1
end
local present, size = presence(KEYS[2], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
local a = 7
for i = 3, #KEYS, 2 do
  local window, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  for j = 1, n do
    redis.call('ZADD', KEYS[i], 'GT', now - tonumber(ARGV[a + 1]), ARGV[a])
    a = a + 2
  end
  if n > 0 then redis.call('PEXPIRE', KEYS[i], window) end
  if lost == 1 and redis.call('PTTL', KEYS[i + 1]) < window then redis.call('SET', KEYS[i + 1], '1', 'PX', window) end
end
return {0, lost, size, present, now, epoch}
`

// KEYS: epoch, members, then the cool-down of each scope. ARGV: deadline, member, ttl,
// floor, epoch expected. Returns {code, fleet size, present, now, ms left of each cool-down}:
// 0 present, 3 late, 5 the epoch is not the one expected. Every sidecar so learns each
// cool-down the fleet holds, and keeps it should Redis go away.
const HEARTBEAT = PRELUDE + `
if late(tonumber(ARGV[1])) then return {3, 0, 0, now} end
if redis.call('GET', KEYS[1]) ~= ARGV[5] then return {5, 0, 0, now} end
local present, size = presence(KEYS[2], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]))
local out = {0, size, present, now}
for i = 3, #KEYS do out[#out + 1] = redis.call('PTTL', KEYS[i]) end
return out
`

// KEYS: epoch, members, cooldown, then (log, gate) per limit. ARGV: floor, epoch expected, then
// (count, window ms) per limit. Read-only (RateLimit fields, the remaining-budget gauges): per
// limit, what the fleet may still send now, counted as TAKE counts it (the shares of absent
// sidecars kept back), and the ms until that grows (a send leaves the window: the oldest while
// there is room, else the one whose exit lets one more in); nothing while cooling down or gated. Returns {code, now, then (left, ms) per limit}: 0, or 5 the epoch.
const PEEK = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- MGET: Redis's GET statistics stay the read cache's own (test/cache/fleet.test.ts counts them).
if redis.call('MGET', KEYS[1])[1] ~= ARGV[2] then return {5, now} end
local present = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local size = math.max(present, tonumber(ARGV[1]))
local cd = redis.call('PTTL', KEYS[3])
local out = {0, now}
for i = 4, #KEYS, 2 do
  local count, window = tonumber(ARGV[i - 1]), tonumber(ARGV[i])
  local room = count
  if size > present then room = count - (size - present) * math.floor(count / size) end
  local used = redis.call('ZCOUNT', KEYS[i], '(' .. (now - window), '+inf')
  -- The send whose exit lets one more in (the oldest while there is room).
  local leaving = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. (now - window), '+inf', 'WITHSCORES', 'LIMIT', math.max(0, used - room), 1)
  local ms = 0
  if leaving[2] then ms = tonumber(leaving[2]) + window - now end
  local gate = redis.call('PTTL', KEYS[i + 1])
  if gate > 0 or cd > 0 then
    out[#out + 1] = 0
    out[#out + 1] = math.max(gate, cd, ms)
  else
    out[#out + 1] = math.max(0, room - used)
    out[#out + 1] = ms
  end
end
return out
`

// KEYS: the logs of a rule's limits. ARGV: the send id. A send that never reached the upstream.
const REFUND = `
for i = 1, #KEYS do redis.call('ZREM', KEYS[i], ARGV[1]) end
return 0
`

// KEYS[1] the scope's cool-down (value: its length; PTTL: what is left), KEYS[2] the last
// cool-down's length, kept for twice its length (the backoff window, store.ts nextCooldownMs).
// ARGV: Retry-After ms (-1 for none), base ms, max ms. Returns the ms until the cool-down ends.
const COOL_DOWN = `
local active = redis.call('PTTL', KEYS[1])
if active < 0 then active = 0 end
local ra = tonumber(ARGV[1])
local len
if ra >= 0 then
  len = math.min(ra, tonumber(ARGV[3]))
  if len <= active then return active end
else
  if active > 0 then return active end
  local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
  if previous > 0 then len = math.min(previous * 2, tonumber(ARGV[3])) else len = math.min(tonumber(ARGV[2]), tonumber(ARGV[3])) end
end
redis.call('SET', KEYS[1], len, 'PX', len)
redis.call('SET', KEYS[2], len, 'PX', len * 2)
return len
`

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

export function createRedisStore ({ url, timeoutMs, prefix, clock, currentUrl }: RedisStoreOptions) {
  const connection = openRedis({ url, timeoutMs, ...(currentUrl === undefined ? {} : { currentUrl }) })
  const { displayUrl } = connection
  const client = connection.client as ScriptClient
  client.defineCommand('sapTake', { lua: TAKE })
  client.defineCommand('sapReassert', { lua: REASSERT })
  client.defineCommand('sapHeartbeat', { lua: HEARTBEAT })
  client.defineCommand('sapRefund', { lua: REFUND })
  client.defineCommand('sapCoolDown', { lua: COOL_DOWN })
  client.defineCommand('sapPeek', { lua: PEEK })

  let listener: ((up: boolean, err?: unknown) => void) | undefined
  let lastError: unknown
  // ioredis prints unhandled 'error' events to the console; the fleet store logs state changes itself.
  client.on('error', (err) => { lastError = err })
  client.on('ready', () => { listener?.(true) })
  client.on('close', () => { listener?.(false, lastError ?? new Error('the connection closed')) })

  // Redis's clock as last read (ms) and when (local monotonic ms, when the answer came back: so
  // Redis's time now is at least redisMs + (clock.now() - localMs)). Deadlines are written in
  // Redis's time from it: never later than the true send time + timeoutMs.
  let calibration: { redisMs: number, localMs: number } | undefined
  const calibrate = (redisMs: number): void => { calibration = { redisMs, localMs: clock.now() } }
  const deadline = (): number => calibration === undefined ? -1 : Math.floor(calibration.redisMs + (clock.now() - calibration.localMs)) + timeoutMs

  const key = (scope: string, suffix: string): string => `${prefix}${suffix}:${scope}`
  const fleetKeys = [`${prefix}epoch`, `${prefix}members`]
  const logKey = (scope: string, limit: Limit): string => key(scope, `log:${limit.text}`)
  // Stryker disable next-line StringLiteral: one gate for a scope's limits holds for its longest window, and a take waits for the longest gate of its limits anyway
  const gateKey = (scope: string, limit: Limit): string => key(scope, `gate:${limit.text}`)
  const memberArgs = (m: Member): Array<string | number> => [deadline(), m.id, m.presenceTtlMs, m.fleetFloor, m.epoch]

  return {
    displayUrl,
    /** Reads Redis's clock (no side effect): needed once before any script with a deadline. */
    async readClock (): Promise<void> {
      const [seconds, micros] = await client.time()
      calibrate(Number(seconds) * 1000 + Math.floor(Number(micros) / 1000))
    },
    async take (member: Member, scope: string, limits: readonly Limit[], sendId: string): Promise<TakeReply> {
      const keys = [...fleetKeys, key(scope, 'cooldown'), ...limits.flatMap((l) => [logKey(scope, l), gateKey(scope, l)])]
      const args = [...memberArgs(member), sendId, ...limits.flatMap((l) => [l.count, l.windowMs])]
      const reply = await client.sapTake(keys.length, ...keys, ...args)
      calibrate(Number(reply[4]))
      return { code: TAKE_CODES[Number(reply[0])] ?? 'late', ms: Number(reply[1]), fleetSize: Number(reply[2]), present: Number(reply[3]) }
    },
    async reassert (member: Member, limits: readonly ReassertLimit[], newEpoch: string): Promise<ReassertReply> {
      const keys = [...fleetKeys, ...limits.flatMap((l) => [logKey(l.scope, l.limit), gateKey(l.scope, l.limit)])]
      const args = [...memberArgs(member), newEpoch,
        ...limits.flatMap((l) => [l.limit.windowMs, l.sends.length, ...l.sends.flatMap((s) => [s.id, Math.max(0, Math.round(s.ageMs))])])]
      const reply = await client.sapReassert(keys.length, ...keys, ...args)
      const now = Number(reply[4])
      calibrate(now)
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
      const reply = await client.sapHeartbeat(keys.length, ...keys, ...memberArgs(member))
      calibrate(Number(reply[3]))
      const code = Number(reply[0])
      // Stryker disable next-line UnaryOperator: the script answers one PTTL per scope asked, so the default is never read
      const cooldowns = new Map(scopes.map((scope, i) => [scope, Number(reply[4 + i] ?? -2)]))
      return { code: code === 0 ? 'ok' : code === 5 ? 'epoch' : 'late', fleetSize: Number(reply[1]), present: Number(reply[2]), cooldowns }
    },
    /** What each limit may still send now (RateLimit fields); undefined when the epoch is not `epoch`. */
    async peek (epoch: string, floor: number, scope: string, limits: readonly Limit[]): Promise<PeekedLimit[] | undefined> {
      const keys = [...fleetKeys, key(scope, 'cooldown'), ...limits.flatMap((l) => [logKey(scope, l), gateKey(scope, l)])]
      const reply = await client.sapPeek(keys.length, ...keys, floor, epoch, ...limits.flatMap((l) => [l.count, l.windowMs]))
      if (Number(reply[0]) !== 0) return undefined
      return limits.map((_, i) => ({ left: Number(reply[2 + 2 * i]), resetMs: Number(reply[3 + 2 * i]) }))
    },
    async refund (scope: string, limits: readonly Limit[], sendId: string): Promise<void> {
      if (limits.length === 0) return
      await client.sapRefund(limits.length, ...limits.map((l) => logKey(scope, l)), sendId)
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
