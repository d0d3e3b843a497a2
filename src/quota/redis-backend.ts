// Budgets and cool-downs shared in Redis by every sidecar on one credential. Loaded by
// app.ts with a dynamic import() only when RATE_LIMIT_REDIS_URL(_FILE) is set, so that
// ioredis is never loaded otherwise.
//
// Each take is one Lua script over every key of the request's scope, so it is atomic across
// all the rule's limits: it takes a point from each, or (cool-down under way, or a limit
// spent) none at all. rate-limiter-flexible's consume() would not do: it spends points
// even when it refuses, counts Redis windows in whole seconds (`5/500ms` would never
// expire), and a union of limiters spends on the limits that had room when another refuses.
// Windows are fixed, each starting at the first send it counts (PEXPIRE), on Redis's clock.
import { createHash } from 'node:crypto'
import { Redis } from 'ioredis'
import { redisDisplayUrl } from '../config.js'
import type { Limit } from './rules.js'
import type { CooldownRequest, Store, Take } from './store.js'

// KEYS[1] the scope's cool-down; KEYS[2..] one counter per limit; ARGV: count, window ms, per limit.
// Returns {0, 0} (taken), {1, ms} (cooling down), {2, ms} (a limit is spent; all have room in ms).
const TAKE = `
local cd = redis.call('PTTL', KEYS[1])
if cd > 0 then return {1, cd} end
local wait = 0
for i = 2, #KEYS do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used >= tonumber(ARGV[(i - 2) * 2 + 1]) then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl < 0 then
      redis.call('PEXPIRE', KEYS[i], ARGV[(i - 2) * 2 + 2])
      ttl = tonumber(ARGV[(i - 2) * 2 + 2])
    end
    if ttl > wait then wait = ttl end
  end
end
if wait > 0 then return {2, wait} end
for i = 2, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then redis.call('PEXPIRE', KEYS[i], ARGV[(i - 2) * 2 + 2]) end
end
return {0, 0}
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
  /** A command slower than this fails (and the guard falls back to memory). */
  timeoutMs: number
  prefix: string
}

type ScriptClient = Redis & {
  sapTake: (numKeys: number, ...args: Array<string | number>) => Promise<[number, number]>
  sapCoolDown: (numKeys: number, ...args: Array<string | number>) => Promise<number>
}

/** Reconnects back off from 50 ms, doubling, to 2 s. */
export function reconnectDelayMs (attempt: number): number {
  return Math.min(50 * 2 ** Math.min(attempt, 10), 2_000)
}

export function createRedisStore ({ url, timeoutMs, prefix }: RedisStoreOptions) {
  const displayUrl = redisDisplayUrl(url)
  const password = safeDecode(new URL(url).password)
  const client = new Redis(url, {
    lazyConnect: true,
    // A command sent while disconnected fails at once instead of queueing: the guard then
    // answers from memory, and no caller waits for Redis.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(timeoutMs, 1_000),
    retryStrategy: reconnectDelayMs,
    connectionName: 'store-auth-proxy'
  }) as ScriptClient
  client.defineCommand('sapTake', { lua: TAKE })
  client.defineCommand('sapCoolDown', { lua: COOL_DOWN })
  // ioredis prints unhandled 'error' events to the console; the guard logs state changes itself.
  client.on('error', () => {})

  let listener: ((up: boolean, err?: unknown) => void) | undefined
  client.on('ready', () => { listener?.(true) })
  client.on('close', () => { listener?.(false, new Error('the connection closed')) })

  const key = (scope: string, suffix: string): string => `${prefix}${suffix}:${scope}`

  const store = {
    async take (scope: string, limits: readonly Limit[]): Promise<Take> {
      const keys = [key(scope, 'cooldown'), ...limits.map((l) => key(scope, `budget:${l.text}`))]
      const args = limits.flatMap((l) => [l.count, l.windowMs])
      const [kind, ms] = await client.sapTake(keys.length, ...keys, ...args)
      if (kind === 0) return { kind: 'ok' }
      return { kind: kind === 1 ? 'cooldown' : 'budget', ms: Number(ms) }
    },
    async coolDown (scope: string, request: CooldownRequest): Promise<number> {
      return Number(await client.sapCoolDown(2, key(scope, 'cooldown'), key(scope, 'backoff'),
        request.retryAfterMs === undefined ? -1 : Math.round(request.retryAfterMs), request.baseMs, request.maxMs))
    }
  } satisfies Store

  return {
    ...store,
    displayUrl,
    /** Reports the connection coming up (ready) or going down. */
    onState (fn: (up: boolean, err?: unknown) => void): void { listener = fn },
    /** The first connection, bounded by the command timeout (at least 1 s); false if not up by then. */
    async connect (): Promise<boolean> {
      const connecting = client.connect().then(() => true, () => false)
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<boolean>((resolve) => { timer = setTimeout(() => { resolve(false) }, Math.max(timeoutMs, 1_000)).unref() })
      const up = await Promise.race([connecting, timeout])
      clearTimeout(timer)
      return up
    },
    /** Whether Redis answers within the timeout now. */
    async ping (): Promise<boolean> {
      if (client.status !== 'ready') return false
      try {
        await client.ping()
        return true
      } catch {
        return false
      }
    },
    /** A failure's reason for the log: never the URL's credentials. */
    describe (err: unknown): string {
      const message = err instanceof Error ? err.message : String(err)
      let safe = message.split(url).join(displayUrl)
      if (password !== '') safe = safe.split(password).join('***')
      return safe
    },
    async close (): Promise<void> {
      listener = undefined
      client.disconnect()
    }
  }
}

function safeDecode (text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}

export type RedisStore = ReturnType<typeof createRedisStore>
