// Keys shared by the fleet in the budgets' Redis: one Lua script takes a key atomically, so two
// sidecars never both send one. Redis away: every keyed request is refused (503), never sent
// unchecked. Redis restarted empty (its epoch key gone): keys are refused for a recovery
// window while every sidecar writes back the keys it holds (its own mirror, journaled in the
// state directory when there is one) and adopts the new epoch (docs/idempotency.md).
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { Logger } from 'pino'
import type { Clock } from '../clock.js'
import { openRedis, type RedisConnectionOptions } from '../redis/connection.js'
import type { Entry, KeyStore, Pending, Settled, Taken } from './entries.js'
import type { MemoryStore } from './memory-store.js'

export interface RedisKeyTiming {
  /** How often a sidecar looks at the epoch key (Redis restarted empty?). */
  checkMs: number
  /** After a loss, how long every sidecar refuses keys while the fleet writes its keys back. */
  recoveryMs: number
}

export const DEFAULT_REDIS_KEY_TIMING: RedisKeyTiming = { checkMs: 1000, recoveryMs: 5000 }

// A key's hash: state, fp, owner, deadline, expiresAt; for a done one status, headers (JSON), body.
// `owner` is the claim that took it (PROCESS:N): PUT and RELEASE act on a pending key only for
// that claim. A pending key of an older sidecar (its owner the bare process id) matches no claim
// of this one: it is held until its deadline, then unknown.
const TAKE = `
local e = redis.call('GET', KEYS[2])
if e ~= ARGV[1] then return {'lost'} end
local r = redis.call('PTTL', KEYS[3])
if r > 0 then return {'recovering', tostring(r)} end
local held = redis.call('HGETALL', KEYS[1])
if #held > 0 then
  table.insert(held, 1, 'held')
  return held
end
redis.call('HSET', KEYS[1], 'state', 'pending', 'fp', ARGV[2], 'owner', ARGV[3], 'deadline', ARGV[4], 'expiresAt', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'taken'}`

// Writes a settled entry over a pending one of ARGV[2] (or, ARGV[2] = '', over none or any
// pending one: a mirror's key written back); 'no' when the key is not that.
const PUT = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'lost' end
local state = redis.call('HGET', KEYS[1], 'state')
if ARGV[2] ~= '' then
  if state ~= 'pending' or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2] then return 'no' end
elseif state and state ~= 'pending' then
  return 'no'
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 'ok'`

const RELEASE = `
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 'lost' end
if ARGV[2] ~= '' and (redis.call('HGET', KEYS[1], 'state') ~= 'pending' or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[2]) then return 'no' end
if redis.call('DEL', KEYS[1]) == 1 then return 'ok' end
return 'no'`

// The epoch, created with a recovery window when there is none (a new or emptied Redis).
const EPOCH = `
local e = redis.call('GET', KEYS[1])
if e then return e end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return ARGV[1]`

type Scripts = Redis & {
  idemTake: (...args: Array<string | number>) => Promise<Buffer[]>
  idemPut: (...args: Array<string | number | Buffer>) => Promise<string>
  idemRelease: (...args: Array<string | number>) => Promise<string>
  idemEpoch: (...args: Array<string | number>) => Promise<string>
}

export interface RedisKeyStoreOptions {
  connection: RedisConnectionOptions
  /** The credential's key prefix (quota/redis-backend.ts redisKeyPrefix). */
  prefix: string
  clock: Clock
  log: Logger
  /** This sidecar's own keys: what it writes back after Redis lost them. */
  mirror: MemoryStore
  timing?: Partial<RedisKeyTiming>
}

class Lost extends Error {}

export function createRedisKeyStore ({ connection, prefix, clock, log, mirror, timing = {} }: RedisKeyStoreOptions): KeyStore {
  const { checkMs, recoveryMs } = { ...DEFAULT_REDIS_KEY_TIMING, ...timing }
  const redis = openRedis(connection)
  const client = redis.client as Scripts
  // A connection error fails the commands under way (each answered 503); reconnection goes on by itself.
  client.on('error', (err: unknown) => { log.debug({ reason: redis.describe(err) }, 'idempotency redis connection error') })
  client.defineCommand('idemTake', { numberOfKeys: 3, lua: TAKE })
  client.defineCommand('idemPut', { numberOfKeys: 2, lua: PUT })
  client.defineCommand('idemRelease', { numberOfKeys: 2, lua: RELEASE })
  client.defineCommand('idemEpoch', { numberOfKeys: 2, lua: EPOCH })
  const EPOCH_KEY = `${prefix}idem:epoch`
  const RECOVERING_KEY = `${prefix}idem:recovering`
  const keyOf = (id: string): string => `${prefix}idem:k:${id}`
  /** The epoch this sidecar's keys are in ('' until it has one). */
  let epoch = ''
  let recovering: Promise<void> | undefined
  let cancelCheck = (): void => {}
  let closed = false

  /** Finds the epoch (creating one), and writes this sidecar's keys back when it is new to it. */
  function recover (): Promise<void> {
    recovering ??= (async () => {
      const now = await client.idemEpoch(EPOCH_KEY, RECOVERING_KEY, randomUUID(), recoveryMs)
      if (now === epoch) return
      const before = epoch
      epoch = now
      let written = 0
      for (const [id, entry] of mirror.entries()) {
        if (entry.expiresAt <= clock.wallNow()) continue
        if (await put(id, '', entry) === 'ok') written += 1
      }
      if (before !== '') log.error({ written }, 'idempotency keys lost in redis (restarted empty?): this sidecar\'s keys written back; keyed requests refused during the recovery window')
      else if (written > 0) log.info({ written }, 'idempotency keys of this sidecar written to redis')
    })().finally(() => { recovering = undefined })
    return recovering
  }

  function check (): void {
    if (closed) return
    recover().catch(() => {}).finally(() => { if (!closed) cancelCheck = clock.setTimer(check, checkMs) })
  }

  async function put (id: string, owner: string, entry: Entry): Promise<string> {
    const ttl = Math.max(1, entry.expiresAt - clock.wallNow())
    return await client.idemPut(keyOf(id), EPOCH_KEY, epoch, owner, ttl, ...fields(entry))
  }

  async function lost (): Promise<never> {
    await recover().catch(() => {})
    throw new Lost()
  }

  return {
    backend: 'redis',
    async take (id: string, entry: Pending): Promise<Taken> {
      try {
        const ttl = Math.max(1, entry.expiresAt - clock.wallNow())
        const reply = await client.idemTake(keyOf(id), EPOCH_KEY, RECOVERING_KEY, epoch, entry.fingerprint, entry.owner, entry.deadline, entry.expiresAt, ttl)
        const code = reply[0]?.toString()
        if (code === 'lost') await lost()
        if (code === 'recovering') return { kind: 'unavailable', reason: 'redis lost its keys and the fleet is writing them back', retryAfterMs: Number(reply[1]?.toString()) }
        if (code === 'taken') {
          const mirrored = await mirror.put(id, entry).then(() => true, () => false)
          if (mirrored) return { kind: 'taken' }
          // Not written where it would outlive this process: given back, and nothing sent.
          await client.idemRelease(keyOf(id), EPOCH_KEY, epoch, entry.owner).catch(() => {})
          return { kind: 'unavailable', reason: 'the state directory cannot be written', retryAfterMs: 1000 }
        }
        const held = parseEntry(reply.slice(1))
        if (held === undefined) return { kind: 'unavailable', reason: 'redis holds a key this sidecar cannot read', retryAfterMs: 1000 }
        return { kind: 'held', entry: held }
      } catch (err) {
        if (err instanceof Lost) return { kind: 'unavailable', reason: 'redis lost its keys and the fleet is writing them back', retryAfterMs: recoveryMs }
        // A take that timed out may have taken the key all the same: given back, as nothing is sent
        // (only if this claim took it: a key held by another request stays held).
        client.idemRelease(keyOf(id), EPOCH_KEY, epoch, entry.owner).catch(() => {})
        return { kind: 'unavailable', reason: 'the fleet\'s redis is not answering', retryAfterMs: 1000 }
      }
    },
    async settle (id: string, owner: string, next: Settled): Promise<boolean> {
      // '' is the scripts' "any pending key" (a mirror's key written back): never a claim's.
      if (owner === '') return false
      const mirrored = await mirror.settle(id, owner, next)
      const code = await put(id, owner, next)
      if (code === 'lost') await lost()
      return code === 'ok' || mirrored
    },
    async release (id: string, owner?: string): Promise<boolean> {
      if (owner === '') return false
      const mirrored = await mirror.release(id, owner)
      const code = await client.idemRelease(keyOf(id), EPOCH_KEY, epoch, owner ?? '')
      if (code === 'lost') await lost()
      return code === 'ok' || mirrored
    },
    counts: () => mirror.counts(),
    async start (): Promise<void> {
      await mirror.start()
      if (await redis.connect()) await recover().catch((err: unknown) => { log.warn({ reason: redis.describe(err) }, 'idempotency keys: redis not answering') })
      // A key pending when this process last ended (its state directory says) is unknown for the fleet too.
      for (const [id, entry] of mirror.entries()) {
        if (entry.state === 'unknown') await put(id, '', entry).catch(() => {})
      }
      cancelCheck = clock.setTimer(check, checkMs)
    },
    async close (): Promise<void> {
      closed = true
      cancelCheck()
      await mirror.close()
      redis.client.disconnect()
    }
  }
}

function fields (entry: Entry): Array<string | number | Buffer> {
  const base = ['state', entry.state, 'fp', entry.fingerprint, 'expiresAt', entry.expiresAt]
  if (entry.state === 'pending') return [...base, 'owner', entry.owner, 'deadline', entry.deadline]
  if (entry.state === 'unknown') return base
  return [...base, 'status', entry.answer.statusCode, 'headers', JSON.stringify(entry.answer.headers), 'body', entry.answer.body]
}

/** A key's hash as HGETALL gives it (name, value, ...), or undefined when it is not one. */
export function parseEntry (pairs: readonly Buffer[]): Entry | undefined {
  const f = new Map<string, Buffer>()
  for (let i = 0; i + 1 < pairs.length; i += 2) f.set(pairs[i]?.toString() ?? '', pairs[i + 1] ?? Buffer.alloc(0))
  const text = (name: string): string | undefined => f.get(name)?.toString()
  const fingerprint = text('fp')
  const expiresAt = Number(text('expiresAt'))
  if (fingerprint === undefined || !Number.isFinite(expiresAt)) return undefined
  const state = text('state')
  if (state === 'unknown') return { state, fingerprint, expiresAt }
  if (state === 'pending') {
    const owner = text('owner')
    const deadline = Number(text('deadline'))
    return owner === undefined || !Number.isFinite(deadline) ? undefined : { state, fingerprint, owner, deadline, expiresAt }
  }
  const statusCode = Number(text('status'))
  const body = f.get('body')
  if (state !== 'done' || !Number.isInteger(statusCode) || body === undefined) return undefined
  try {
    const headers = JSON.parse(text('headers') ?? '') as Record<string, string>
    return { state, fingerprint, expiresAt, answer: { statusCode, headers, body } }
  } catch {
    return undefined
  }
}
