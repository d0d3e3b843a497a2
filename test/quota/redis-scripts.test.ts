// The Redis side of the fleet's tally, on a real redis-server: what each script promises (a
// sliding log per limit, budget refusals told apart from cool-downs, the cool-down's backoff,
// refunds, a lost epoch gating every limit, deadlines in Redis's own time), what the
// connection reports, and which errors name the credentials. The scripts are one string
// each: only tests like these can tell their logic wrong.
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import type { Clock } from '../../src/clock.js'
import { systemClock } from '../../src/clock.js'
import { createRedisStore, redisAuthProblem, type Member } from '../../src/quota/redis-backend.js'
import type { Limit } from '../../src/config/rate-limit-rules.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'

const SCOPE = 'GET /a'
const HOUR_MS = 3_600_000
const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })

/**
 * A Redis store on `server` whose local monotonic clock runs with the system's, shifted by
 * what the test says: `lag(ms)` makes Redis's clock seem `ms` ahead of the last reading.
 */
async function backend (t: Test, server: FaultyRedis, { prefix = 'test:', timeoutMs = 2_000 } = {}) {
  let shift = 12_345
  const clock: Clock = { ...systemClock, now: () => performance.now() + shift }
  const store = createRedisStore({ url: server.url, timeoutMs, prefix, clock })
  t.teardown(() => store.close())
  t.ok(await store.connect(), 'connected')
  const member: Member = { id: `m-${prefix}${Math.random()}`, presenceTtlMs: 60_000, fleetFloor: 0, epoch: '' }
  /** Tells Redis this member (no sends) and learns the epoch: a take needs it. */
  const join = async (): Promise<void> => {
    const reply = await store.reassert(member, [], `e${Math.random()}`)
    member.epoch = reply.epoch
  }
  return { store, member, join, lag: (ms: number) => { shift -= ms } }
}

async function admin (t: Test, server: FaultyRedis): Promise<Redis> {
  const client = new Redis({ port: server.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1 })
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return client
}

t.test('every limit of a rule has its own log: the short window emptying never frees the long one', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  const limits = [limit(2, 300), limit(3, HOUR_MS)]
  let n = 0
  const take = async () => await store.take(member, SCOPE, limits, `s${n++}`)
  t.match(await take(), { code: 'ok' })
  t.match(await take(), { code: 'ok' })
  const short = await take()
  t.equal(short.code, 'budget', 'two in 300 ms')
  t.ok(short.ms > 0 && short.ms <= 300, `room within the short window (${short.ms} ms)`)
  await eventually(t, 'the short window has room again', async () => (await take()).code === 'ok')
  const long = await take()
  t.equal(long.code, 'budget', 'three in the hour, whatever the short window says')
  t.ok(long.ms > HOUR_MS - 60_000 && long.ms <= HOUR_MS, `room only when the first send leaves the hour (${long.ms} ms)`)
})

t.test('a spent budget is refused as a budget (callers may wait for the room); a cool-down as a cool-down', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  const limits = [limit(1, HOUR_MS)]
  t.match(await store.take(member, SCOPE, limits, 'a'), { code: 'ok', fleetSize: 1, present: 1 })
  const spent = await store.take(member, SCOPE, limits, 'b')
  t.equal(spent.code, 'budget')
  t.ok(spent.ms > HOUR_MS - 60_000 && spent.ms <= HOUR_MS, `${spent.ms}`)
  t.equal(await store.coolDown(SCOPE, { retryAfterMs: 30_000, baseMs: 1_000, maxMs: 60_000 }), 30_000)
  const cooling = await store.take(member, SCOPE, limits, 'c')
  t.equal(cooling.code, 'cooldown', 'the cool-down set by coolDown is the one a take meets')
  t.ok(cooling.ms > 20_000 && cooling.ms <= 30_000, `${cooling.ms}`)
  t.match(await store.take(member, 'GET /other', [limit(1, HOUR_MS)], 'd'), { code: 'ok' }, 'another scope is not cooling down')
})

t.test('cool-downs: Retry-After (capped) lengthens, never shortens; without it the base, then twice the last within twice its length', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  const none = { retryAfterMs: undefined, baseMs: 200, maxMs: 10_000 }
  t.equal(await store.coolDown(SCOPE, none), 200, 'no Retry-After: the base')
  const again = await store.coolDown(SCOPE, none)
  t.ok(again > 0 && again <= 200, `a second 429 during it changes nothing (${again} ms left)`)
  await eventually(t, 'the cool-down ends', async () => (await store.take(member, SCOPE, [], 'x')).code !== 'cooldown')
  t.equal(await store.coolDown(SCOPE, none), 400, 'the next, within twice the last length: doubled')
  t.equal(await store.coolDown(SCOPE, { ...none, retryAfterMs: 9_000 }), 9_000, 'a longer Retry-After lengthens it')
  const shorter = await store.coolDown(SCOPE, { ...none, retryAfterMs: 1_000 })
  t.ok(shorter > 5_000 && shorter <= 9_000, `a shorter one does not shorten it (${shorter})`)
  t.equal(await store.coolDown('GET /b', { ...none, retryAfterMs: 99_000 }), 10_000, 'capped at the maximum')
})

t.test('a refund takes the send out of every limit of its rule; nothing to refund is no error', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  const limits = [limit(1, HOUR_MS), limit(5, HOUR_MS)]
  t.match(await store.take(member, SCOPE, limits, 'first'), { code: 'ok' })
  t.match(await store.take(member, SCOPE, limits, 'second'), { code: 'budget' })
  await store.refund(SCOPE, limits, 'first')
  t.match(await store.take(member, SCOPE, limits, 'second'), { code: 'ok' }, 'the point is free again')
  await store.refund(SCOPE, [], 'second')
  t.match(await store.take(member, SCOPE, limits, 'third'), { code: 'budget' }, 'an empty refund refunded nothing')
})

t.test('the ledger told again: sends keep their age; the epoch is created once, with its birth time', async (t) => {
  const server = await startRedis(t)
  const { store, member } = await backend(t, server)
  const window = limit(1, 20_000)
  const first = await store.reassert(member, [{ scope: SCOPE, limit: window, sends: [{ id: 'old', ageMs: 15_000 }] }], 'epoch-one')
  t.match(first, { late: false, lost: false, fleetSize: 1, present: 1 })
  t.match(first.epoch, /^epoch-one:\d+$/)
  t.ok(first.epochAgeMs >= 0 && first.epochAgeMs < 1_000, `a new epoch is young (${first.epochAgeMs} ms)`)
  member.epoch = first.epoch
  const spent = await store.take(member, SCOPE, [window], 'new')
  t.equal(spent.code, 'budget', 'the send told again counts')
  t.ok(spent.ms > 0 && spent.ms <= 5_000, `from when it was sent, 15 s ago: room within 5 s (${spent.ms} ms)`)

  const other = await backend(t, server)
  const joined = await other.store.reassert(other.member, [], 'epoch-two')
  t.match(joined, { lost: false, fleetSize: 2, present: 2, epoch: first.epoch }, 'a second sidecar joins the epoch, not a new one')
  await eventually(t, 'the epoch ages', async () => (await store.reassert(member, [], 'x')).epochAgeMs >= 50)
  const again = await store.reassert(member, [], 'epoch-three')
  t.match(again, { lost: false, epoch: first.epoch })
  t.ok(again.epochAgeMs >= 50 && again.epochAgeMs < 60_000, `its age grows (${again.epochAgeMs} ms)`)
})

t.test('Redis lost its data: the epoch is new, told as lost, and every limit of every rule is gated for its window', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  const limits = [limit(100, 1_000), limit(1_000, HOUR_MS)]
  const known = member.epoch
  t.equal(await server.command('FLUSHALL'), '+OK')
  t.match(await store.take(member, SCOPE, limits, 'a'), { code: 'epoch' }, 'nothing done against an unknown epoch')
  t.match(await store.heartbeat(member, [SCOPE]), { code: 'epoch' })
  const told = await store.reassert(member, [{ scope: SCOPE, limit: limits[0]!, sends: [] }, { scope: SCOPE, limit: limits[1]!, sends: [] }], 'after')
  t.match(told, { late: false, lost: true })
  t.not(told.epoch, known)
  member.epoch = told.epoch
  const gated = await store.take(member, SCOPE, limits, 'b')
  t.equal(gated.code, 'gated')
  t.ok(gated.ms > HOUR_MS - 60_000 && gated.ms <= HOUR_MS, `for the longest window (${gated.ms} ms)`)
})

t.test('the heartbeat: presence, the fleet size, and what is left of each scope\'s cool-down, in the order asked', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server)
  await join()
  await store.coolDown('GET /b', { retryAfterMs: 30_000, baseMs: 1_000, maxMs: 60_000 })
  const beat = await store.heartbeat({ ...member, fleetFloor: 3 }, [SCOPE, 'GET /b'])
  t.match(beat, { code: 'ok', fleetSize: 3, present: 1 })
  t.ok((beat.cooldowns.get(SCOPE) ?? 1) <= 0, 'no cool-down on the first scope')
  const b = beat.cooldowns.get('GET /b') ?? 0
  t.ok(b > 20_000 && b <= 30_000, `the second scope's (${b} ms)`)
})

t.test('every key is under the credential\'s prefix: two credentials share nothing, not even presence', async (t) => {
  const server = await startRedis(t)
  const a = await backend(t, server, { prefix: 'one:' })
  const b = await backend(t, server, { prefix: 'two:' })
  await a.join()
  await b.join()
  t.match(await a.store.take(a.member, SCOPE, [limit(1, HOUR_MS)], 'x'), { code: 'ok', present: 1 })
  t.match(await b.store.take(b.member, SCOPE, [limit(1, HOUR_MS)], 'x'), { code: 'ok', present: 1 }, 'the other credential\'s budget is its own')
  await a.store.coolDown(SCOPE, { retryAfterMs: 5_000, baseMs: 1_000, maxMs: 60_000 })
  const keys = await (await admin(t, server)).keys('*')
  t.ok(keys.length >= 6, keys.join(', '))
  t.same(keys.filter((k) => !k.startsWith('one:') && !k.startsWith('two:')), [], 'no key outside the prefixes')
})

t.test('deadlines are in Redis\'s time: a script that arrives after its deadline does nothing, and each answer re-reads Redis\'s clock', async (t) => {
  const server = await startRedis(t)
  const { store, member, lag } = await backend(t, server)
  lag(60_000)
  t.match(await store.reassert(member, [], 'e'), { late: false }, 'no clock read yet: no deadline')
  await store.readClock()
  lag(10_000)
  t.match(await store.reassert(member, [], 'e'), { late: true }, 'Redis\'s clock ran ahead of the reading: late')
  const told = await store.reassert(member, [], 'e')
  t.match(told, { late: false }, 'the late answer carried Redis\'s time')
  member.epoch = told.epoch
  lag(10_000)
  t.match(await store.take(member, SCOPE, [limit(1, HOUR_MS)], 'late'), { code: 'late' })
  t.match(await store.take(member, SCOPE, [limit(1, HOUR_MS)], 'on-time'), { code: 'ok' }, 'the late take did nothing, and recalibrated')
  lag(10_000)
  t.match(await store.heartbeat(member, [SCOPE]), { code: 'late' })
  t.match(await store.heartbeat(member, [SCOPE]), { code: 'ok' })

  const fresh = await backend(t, server)
  await fresh.store.readClock()
  fresh.lag(10_000)
  t.match(await fresh.store.heartbeat(fresh.member, [SCOPE]), { code: 'late' }, 'a deadline from the clock read alone')
})

t.test('a PING is recovery only when Redis answers it in time: frozen or stopped is not', async (t) => {
  const server = await startRedis(t)
  const { store } = await backend(t, server, { timeoutMs: 300 })
  t.equal(await store.ping(), true)
  server.freeze()
  t.equal(await store.ping(), false, 'no answer within the timeout')
  server.thaw()
  let down = false
  store.onState((up) => { down = !up })
  await server.stop()
  await eventually(t, 'the connection is down', () => down)
  t.equal(await store.ping(), false, 'stopped: reconnecting')
})

t.test('the connection reports going down, with a reason, and coming back', async (t) => {
  const server = await startRedis(t)
  const { store } = await backend(t, server)
  const events: Array<{ up: boolean, err: unknown }> = []
  store.onState((up, err) => { events.push({ up, err }) })
  await server.stop()
  await eventually(t, 'down', () => events.some((e) => !e.up))
  const down = events.find((e) => !e.up)
  t.ok(down?.err instanceof Error && store.describe(down.err) !== '', `a reason: ${String(down?.err)}`)
  t.notOk(events.some((e) => e.up), 'not up while down')
  await server.start()
  await eventually(t, 'up again', () => events.at(-1)?.up === true)
  t.equal(await store.ping(), true)
})

t.test('which Redis errors say the credentials are refused', async (t) => {
  const refused = [
    'NOAUTH Authentication required.',
    'WRONGPASS invalid username-password pair or user is disabled.',
    'NOPERM this user has no permissions to run the \'evalsha\' command',
    'ERR invalid password',
    'ERR invalid username-password pair',
    'ERR Client sent AUTH, but no password is set'
  ]
  for (const message of refused) t.match(redisAuthProblem(new Error(message)), /^redis refused our credentials/, message)
  t.match(redisAuthProblem('WRONGPASS x'), /\(WRONGPASS\)/, 'not only Error objects')
  for (const message of ['Command timed out', 'connect ECONNREFUSED 127.0.0.1:6379', 'ERR unknown command', 'Connection is closed.']) {
    t.equal(redisAuthProblem(new Error(message)), undefined, message)
  }
})

t.test('the tally carries no TTL (a volatile-* policy never evicts it); a gate holds until the time it stores, or its TTL when an earlier version set it', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server, { prefix: 'tally:' })
  await join()
  const limits = [limit(5, 1_000)]
  t.match(await store.take(member, SCOPE, limits, 'a'), { code: 'ok' })
  const client = await admin(t, server)
  const keys = await client.keys('tally:*')
  t.ok(keys.some((k) => k.includes(':log:')), keys.join(', '))
  for (const key of keys) t.equal(await client.pttl(key), -1, `${key}: no TTL`)
  // Data lost: every limit is gated for its window, by a value.
  t.equal(await server.command('FLUSHALL'), '+OK')
  const told = await store.reassert(member, [{ scope: SCOPE, limit: limits[0]!, sends: [] }], 'after')
  member.epoch = told.epoch
  const [gate] = await client.keys('tally:*gate*')
  t.ok(gate !== undefined)
  t.equal(await client.pttl(gate!), -1, 'the gate has no TTL either')
  const gated = await store.take(member, SCOPE, limits, 'b')
  t.equal(gated.code, 'gated')
  t.ok(gated.ms > 0 && gated.ms <= 1_000, `${gated.ms}`)
  await eventually(t, 'the gate ends with its window', async () => (await store.take(member, SCOPE, limits, `c${Math.random()}`)).code === 'ok')
  // A gate as an earlier version wrote it ('1' with a TTL) still holds a rolling update.
  await client.set(gate!, '1', 'PX', 60_000)
  const old = await store.take(member, SCOPE, limits, 'd')
  t.equal(old.code, 'gated')
  t.ok(old.ms > 50_000 && old.ms <= 60_000, `${old.ms}`)
})

t.test('a log lost and then told again by one sidecar is still found lost: its limit gated until its latest send leaves the window', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server, { prefix: 'told:' })
  await join()
  const hourly = limit(3, HOUR_MS)
  for (const id of ['a', 'b', 'c']) t.match(await store.take(member, SCOPE, [hourly], id), { code: 'ok' })
  const client = await admin(t, server)
  const [log] = await client.keys('told:log:*')
  await client.del(log!)
  await store.reassert(member, [{ scope: SCOPE, limit: hourly, sends: [{ id: 'c', ageMs: 0 }] }], 'x')
  const after = await store.take(member, SCOPE, [hourly], 'd')
  t.equal(after.code, 'gated', 'not 2 more on a log holding only the sends told again')
  t.ok(after.ms > HOUR_MS - 60_000, `${after.ms}`)
})

t.test('a refund makes the tally forget its log\'s latest send: a send an earlier version refunded with a bare ZREM is no loss', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server, { prefix: 'mixed:' })
  await join()
  const hourly = limit(5, HOUR_MS)
  t.match(await store.take(member, SCOPE, [hourly], 'new'), { code: 'ok' })
  const client = await admin(t, server)
  const [log] = await client.keys('mixed:log:*')
  await client.zadd(log!, Date.now(), 'old')
  await store.refund(SCOPE, [hourly], 'new')
  await client.zrem(log!, 'old')
  t.match(await store.take(member, SCOPE, [hourly], 'next'), { code: 'ok' }, 'not gated')
})

t.test('a send leaving is timed from Redis\'s now in every log of its rule, never earlier, the tally\'s latest with it; one dropped while it waited is added again', async (t) => {
  const server = await startRedis(t)
  const { store, member, join } = await backend(t, server, { prefix: 'late:' })
  await join()
  const limits = [limit(1, 200), limit(5, HOUR_MS)]
  t.match(await store.take(member, SCOPE, limits, 'waited'), { code: 'ok' })
  const client = await admin(t, server)
  const logs = (await client.keys('late:log:*')).sort()
  t.equal(logs.length, 2)
  const admitted = Number(await client.zscore(logs[1]!, 'waited'))
  // The short window's log drops it while it waits (another take prunes it).
  await eventually(t, 'dropped from the short log', async () => (await store.take(member, SCOPE, limits, `other${Math.random()}`)).code === 'ok')
  t.equal(await client.zscore(logs[0]!, 'waited'), null)
  await store.leaving(SCOPE, limits, 'waited')
  const [seconds, micros] = await client.time()
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  for (const log of logs) {
    const at = Number(await client.zscore(log, 'waited'))
    t.ok(at > admitted && at <= now, `${log}: timed from when it left`)
    t.equal(Number(await client.hget('late:tally', log)), at, 'the tally\'s latest send')
  }
  await client.zadd(logs[1]!, now + 60_000, 'waited')
  await store.leaving(SCOPE, limits, 'waited')
  t.equal(Number(await client.zscore(logs[1]!, 'waited')), now + 60_000, 'never earlier')
  await store.leaving(SCOPE, [], 'waited')
})
