// The fleet's one fetch per key (src/cache/fleet-fetch.ts) against a scripted Redis and a fake
// clock: who fetches, what a waiter gets, the lease renewed while the fetch runs and released
// (or replaced by the failure) when it ends, and every way out when Redis fails or a claimant dies.
import { EventEmitter } from 'node:events'
import t from 'tap'
import type { Entry } from '../../src/cache/entries.js'
import {
  FAILURE_SHOWN_MS, FLEET_POLL_MS, LEASE_MS, createFleetFetch, decodeFailure, encodeFailure, failureAnswer, fleetWide, type Claim, type FleetClaims
} from '../../src/cache/fleet-fetch.js'
import type { Failure } from '../../src/cache/flights.js'
import type { CacheKey } from '../../src/cache/policy.js'
import {
  TokenUnavailableError, UpstreamBadResponseError, UpstreamRateLimitedError, UpstreamTimeoutError, UpstreamUnreachableError
} from '../../src/http/errors.js'
import { fakeClock } from '../helpers/fake-clock.js'

const key = { id: 'k', display: '/a' } as unknown as CacheKey
const entry = (storedAt: number): Entry => ({ status: 200, headers: {}, body: Buffer.from('x'), freshMs: 1_000, staleMs: 9_000, initialAgeMs: 0, vary: [], rule: 'r', display: '/a', uri: '/a', storedAt })

type Look = Awaited<ReturnType<FleetClaims['look']>>

/** A scripted Redis: claims answer from `claimsSay`, looks from `looksSay`; every call recorded. */
function scripted () {
  const calls: string[] = []
  const claimsSay: Array<Claim | Error> = []
  const looksSay: Array<Look | Error> = []
  const next = <T>(queue: Array<T | Error>, fallback: T): T => {
    const said = queue.length > 1 ? queue.shift() : queue[0]
    if (said instanceof Error) throw said
    return said ?? fallback
  }
  const claims: FleetClaims = {
    async claim (id, value, knownLeftMs) { calls.push(`claim ${id} ${knownLeftMs}`); return next(claimsSay, { kind: 'claimed' }) },
    async renew (id) { calls.push(`renew ${id}`) },
    async release (id, _value, failure) { calls.push(`release ${id}${failure === undefined ? '' : ' failed'}`) },
    async look (id) { calls.push(`look ${id}`); return next(looksSay, { stored: false, held: 'live' }) }
  }
  return { calls, claimsSay, looksSay, claims }
}

function setup (found: Entry | undefined = undefined) {
  const clock = fakeClock()
  const redis = scripted()
  const errors: string[] = []
  let stored: Entry | undefined
  const fleet = createFleetFetch({
    claims: redis.claims,
    clock: clock.clock,
    fillMs: 2_000,
    find: async () => ({ entry: stored ?? found }),
    failed: (_err, what) => { errors.push(what) }
  })
  const caller = Object.assign(new EventEmitter(), { destroyed: false })
  return { clock, redis, errors, fleet, caller, store: (e: Entry) => { stored = e } }
}

t.test('the first to claim fetches; its lease is renewed while it fetches and released when it ends', async (t) => {
  const { clock, redis, fleet, caller } = setup()
  t.same(await fleet.turn(key, {}, undefined, caller), { kind: 'fetch' })
  t.same(redis.calls, ['claim k -1'], 'a miss claims knowing no copy')
  await clock.tick(LEASE_MS)
  t.same(redis.calls.filter((c) => c === 'renew k'), ['renew k', 'renew k', 'renew k'], 'renewed every third of the lease')
  fleet.ended('k', { entry: undefined, standsIn: false })
  t.equal(redis.calls.at(-1), 'release k')
  const before = redis.calls.length
  await clock.tick(LEASE_MS)
  t.equal(redis.calls.length, before, 'no renewal once it ended')
  fleet.ended('k', { entry: undefined, standsIn: false })
  t.equal(redis.calls.length, before, 'ended once: a flight not claimed here releases nothing')
})

t.test('a failed fetch leaves its failure in the claim\'s place', async (t) => {
  const { redis, fleet, caller } = setup()
  await fleet.turn(key, {}, undefined, caller)
  fleet.ended('k', { entry: undefined, standsIn: false, failure: { error: new UpstreamTimeoutError() } })
  t.equal(redis.calls.at(-1), 'release k failed')
  await fleet.turn(key, {}, undefined, caller)
  fleet.ended('k', { entry: entry(1), standsIn: true, failure: { error: new UpstreamTimeoutError() } })
  t.equal(redis.calls.at(-1), 'release k failed', 'also when a stale answer stood in for it here')
  await fleet.turn(key, {}, undefined, caller)
  fleet.ended('k', { entry: undefined, standsIn: false, failure: { error: new UpstreamRateLimitedError('the fleet\'s budget is spent') } })
  t.equal(redis.calls.at(-1), 'release k failed', 'the fleet\'s budget spent is every sidecar\'s answer')
  await fleet.turn(key, {}, undefined, caller)
  fleet.ended('k', { entry: undefined, standsIn: false, failure: { error: new UpstreamRateLimitedError('cannot be checked'), own: true } })
  t.equal(redis.calls.at(-1), 'release k', 'a budget this sidecar could not check is its own: the claim just goes')
})

t.test('a refresh claims knowing how long its own copy has left', async (t) => {
  const { clock, redis, fleet, caller } = setup()
  const found = entry(clock.clock.now() - 4_000)
  await fleet.turn(key, {}, found, caller)
  t.same(redis.calls, ['claim k 6000'])
})

t.test('another sidecar fetches: the waiter gets its newer entry once Redis has it', async (t) => {
  const { clock, redis, fleet, caller, store } = setup()
  redis.claimsSay.push({ kind: 'held' })
  redis.looksSay.push({ stored: false, held: 'live' }, { stored: true, held: 'none' })
  const turn = fleet.turn(key, {}, undefined, caller)
  const newer = entry(clock.clock.now())
  store(newer)
  await clock.tick(2 * FLEET_POLL_MS)
  t.same(await turn, { kind: 'entry', entry: newer })
  t.same(redis.calls, ['claim k -1', 'look k', 'look k'])
})

t.test('a newer entry already stored when claiming is served, without a claim', async (t) => {
  const { redis, fleet, caller, store } = setup()
  redis.claimsSay.push({ kind: 'stored' })
  const newer = entry(1)
  store(newer)
  t.same(await fleet.turn(key, {}, undefined, caller), { kind: 'entry', entry: newer })
})

t.test('stored, but nothing usable here (TI\'s Vary tells this request apart): it fetches by itself', async (t) => {
  const found = entry(1)
  const { redis, fleet, caller } = setup(found)
  redis.claimsSay.push({ kind: 'stored' })
  t.same(await fleet.turn(key, {}, found, caller), { kind: 'fetch' }, 'the same copy it had is not newer')
  t.same(redis.calls, ['claim k 0'])
})

t.test('another sidecar\'s fetch fails: the waiter gets its failure, whether seen when claiming or while waiting', async (t) => {
  const failure: Failure = { answer: { statusCode: 503, headers: {}, body: Buffer.from('down') } }
  const a = setup()
  a.redis.claimsSay.push({ kind: 'held', failure })
  t.same(await a.fleet.turn(key, {}, undefined, a.caller), { kind: 'failure', failure })
  const b = setup()
  b.redis.claimsSay.push({ kind: 'held' })
  b.redis.looksSay.push({ stored: false, held: failure })
  const turn = b.fleet.turn(key, {}, undefined, b.caller)
  await b.clock.tick(FLEET_POLL_MS)
  t.same(await turn, { kind: 'failure', failure })
})

t.test('a claimant that died: its lease lapses and the waiter claims next', async (t) => {
  const { clock, redis, fleet, caller } = setup()
  redis.claimsSay.push({ kind: 'held' }, { kind: 'claimed' })
  redis.looksSay.push({ stored: false, held: 'live' }, { stored: false, held: 'none' })
  const turn = fleet.turn(key, {}, undefined, caller)
  await clock.tick(2 * FLEET_POLL_MS)
  t.same(await turn, { kind: 'fetch' })
  t.same(redis.calls, ['claim k -1', 'look k', 'look k', 'claim k -1'])
})

t.test('a claimant slower than a whole fetch (or a marker left behind): the waiter fetches by itself, no later than fillMs', async (t) => {
  const { clock, redis, fleet, caller } = setup()
  redis.claimsSay.push({ kind: 'held' })
  const turn = fleet.turn(key, {}, undefined, caller)
  await clock.tick(2_000 + FLEET_POLL_MS)
  t.same(await turn, { kind: 'fetch' })
  t.equal(redis.calls.filter((c) => c === 'look k').length, 2_000 / FLEET_POLL_MS, 'one look each FLEET_POLL_MS meanwhile')
})

t.test('claims that come and go for longer than fillMs: the waiter stops claiming and fetches', async (t) => {
  const { clock, redis, fleet, caller } = setup()
  redis.claimsSay.push({ kind: 'held' })
  redis.looksSay.push({ stored: false, held: 'none' })
  const turn = fleet.turn(key, {}, undefined, caller)
  await clock.tick(2_000 + FLEET_POLL_MS)
  t.same(await turn, { kind: 'fetch' })
})

t.test('the caller leaves while waiting: its looks stop; left while claiming: the claim goes back', async (t) => {
  const a = setup()
  a.redis.claimsSay.push({ kind: 'held' })
  const turn = a.fleet.turn(key, {}, undefined, a.caller)
  await a.clock.tick(FLEET_POLL_MS)
  a.caller.emit('close')
  t.same(await turn, { kind: 'gone' })
  const looks = a.redis.calls.length
  await a.clock.tick(10 * FLEET_POLL_MS)
  t.equal(a.redis.calls.length, looks, 'no look after it left')
  t.equal(a.caller.listenerCount('close'), 0)

  const b = setup()
  b.caller.destroyed = true
  t.same(await b.fleet.turn(key, {}, undefined, b.caller), { kind: 'gone' })
  t.same(b.redis.calls, ['claim k -1', 'release k'])
  const c = setup()
  c.caller.destroyed = true
  c.redis.claimsSay.push({ kind: 'held' })
  t.same(await c.fleet.turn(key, {}, undefined, c.caller), { kind: 'gone' })
  t.same(c.redis.calls, ['claim k -1'], 'nothing to give back')
})

t.test('Redis failing: the request fetches by itself, and the cache hears of it', async (t) => {
  const a = setup()
  a.redis.claimsSay.push(new Error('not connected'))
  t.same(await a.fleet.turn(key, {}, undefined, a.caller), { kind: 'fetch' })
  t.same(a.errors, ['a fetch claim'])
  const b = setup()
  b.redis.claimsSay.push({ kind: 'held' })
  b.redis.looksSay.push(new Error('timeout'))
  const turn = b.fleet.turn(key, {}, undefined, b.caller)
  await b.clock.tick(FLEET_POLL_MS)
  t.same(await turn, { kind: 'fetch' })
  t.same(b.errors, ['a look at the fleet\'s fetch'])
})

t.test('a claim that failed may still run late: it is held as this fetch\'s own, renewed, and released when the fetch ends', async (t) => {
  const { clock, redis, fleet, caller, errors } = setup()
  const values: string[] = []
  redis.claims.claim = async (_id, value) => { values.push(value); throw new Error('Command timed out') }
  redis.claims.release = async (id, value, failure) => { redis.calls.push(`release ${id} ${value === values[0] ? 'same' : 'other'}${failure === undefined ? '' : ' failed'}`) }
  t.same(await fleet.turn(key, {}, undefined, caller), { kind: 'fetch' })
  t.same(errors, ['a fetch claim'])
  await clock.tick(LEASE_MS / 3)
  t.same(redis.calls, ['renew k'], 'renewed as a claim of its own (a no-op in Redis where it never ran)')
  fleet.ended('k', { entry: undefined, standsIn: false, failure: { error: new UpstreamTimeoutError() } })
  t.same(redis.calls, ['renew k', 'release k same failed'], 'released by its value when the fetch ends, its failure shown')
  await clock.tick(LEASE_MS)
  t.equal(redis.calls.length, 2, 'nothing after')
})

t.test('two sidecars in one pid namespace (every container\'s is pid 1) never claim with the same value', async (t) => {
  const values: string[] = []
  for (const one of [setup(), setup()]) {
    one.redis.claims.claim = async (_id, value) => { values.push(value); return { kind: 'claimed' } }
    await one.fleet.turn(key, {}, undefined, one.caller)
  }
  t.equal(new Set(values).size, 2, values.join(' '))
})

t.test('renewals and releases that fail are reported, never thrown; close stops the renewals', async (t) => {
  const { clock, redis, fleet, caller, errors } = setup()
  redis.claims.renew = async () => { throw new Error('renew') }
  redis.claims.release = async () => { throw new Error('release') }
  await fleet.turn(key, {}, undefined, caller)
  await clock.tick(LEASE_MS / 3)
  fleet.ended('k', { entry: undefined, standsIn: false })
  await clock.tick(1)
  t.same(errors, ['a fetch claim\'s renewal', 'a fetch claim\'s release'])
  await fleet.turn({ id: 'j' } as unknown as CacheKey, {}, undefined, caller)
  fleet.close()
  const renewals = errors.length
  await clock.tick(LEASE_MS)
  t.equal(errors.length, renewals, 'no renewal after close')
})

t.test('failure records: TI\'s answer and the sidecar\'s errors cross Redis as answers; anything else is no failure', async (t) => {
  const answer = { statusCode: 404, headers: { 'content-type': 'text/plain' }, body: Buffer.from([0, 255, 1]) }
  t.same(decodeFailure(encodeFailure({ answer })), { answer })
  const refused = failureAnswer({ error: new UpstreamRateLimitedError('the budget of rule r is spent; retry after 9 s'), retryAfterSeconds: 9 })
  t.equal(refused.statusCode, 429)
  t.same(refused.headers, { 'content-type': 'application/json; charset=utf-8', 'retry-after': '9' })
  t.same(JSON.parse(refused.body.toString()), { error: 'UPSTREAM_RATE_LIMITED', message: 'the budget of rule r is spent; retry after 9 s' })
  const carried = failureAnswer({ error: Object.assign(new UpstreamTimeoutError(), { retryAfterSeconds: 3 }) })
  t.equal(carried.statusCode, 504)
  t.equal(carried.headers['retry-after'], '3', 'a Retry-After the error carries')
  const strange = failureAnswer({ error: new Error('boom') })
  t.equal(strange.statusCode, 500)
  t.same(strange.headers, { 'content-type': 'application/json; charset=utf-8' })
  t.same(JSON.parse(strange.body.toString()), { error: 'INTERNAL_ERROR', message: 'the sidecar failed to handle the request' }, 'an error not the sidecar\'s own is not shown')
  for (const value of ['1', 'fetch:1:2:3', 'failed:', 'failed:{', 'failed:{"statusCode":"500","headers":{},"body":""}',
    'failed:{"statusCode":500,"headers":null,"body":""}', 'failed:{"statusCode":500,"headers":{},"body":1}', 'failed:{"statusCode":500,"body":""}']) {
    t.equal(decodeFailure(value), undefined, `${value}: not a failure`)
  }
  t.ok(FAILURE_SHOWN_MS >= 10 * FLEET_POLL_MS, 'a failure stays long enough for every waiter to look')
})

t.test('a value in Redis the request cannot use is no newer entry: it claims past it, and once another\'s claim is gone looks again', async (t) => {
  const a = setup()
  t.same(await a.fleet.turn(key, {}, undefined, a.caller, true), { kind: 'fetch' })
  t.same(a.redis.calls, ['claim k -2'], 'it claims telling Redis to ignore what is stored')
  const b = setup()
  b.redis.claimsSay.push({ kind: 'held' })
  b.redis.looksSay.push({ stored: false, held: 'none' })
  const newer = entry(1)
  b.store(newer)
  const turn = b.fleet.turn(key, {}, undefined, b.caller, true)
  await b.clock.tick(FLEET_POLL_MS)
  t.same(await turn, { kind: 'entry', entry: newer }, 'the claimant\'s entry, read once its claim went')
})

t.test('which failures are the fleet\'s: TI\'s answers and TI\'s own trouble, not this sidecar\'s', async (t) => {
  t.equal(fleetWide({ answer: { statusCode: 404, headers: {}, body: Buffer.alloc(0) } }), true, 'TI\'s answer')
  for (const error of [new UpstreamUnreachableError(), new UpstreamTimeoutError(), new UpstreamBadResponseError(), new UpstreamRateLimitedError('spent')]) {
    t.equal(fleetWide({ error }), true, (error as { code: string }).code)
  }
  t.equal(fleetWide({ error: new TokenUnavailableError() }), false, 'no token of its own')
  t.equal(fleetWide({ error: new Error('boom') }), false, 'no code')
  t.equal(fleetWide({ error: Object.assign(new Error('x'), { code: 42 }) }), false, 'a code that is no string')
})

t.test('an error is shown as the sidecar\'s own answer only with both its code and its status', async (t) => {
  const coded = failureAnswer({ error: Object.assign(new Error('half'), { code: 'SOMETHING' }) })
  t.equal(coded.statusCode, 500)
  t.same(JSON.parse(coded.body.toString()).error, 'INTERNAL_ERROR', 'a code without a status')
  const statused = failureAnswer({ error: Object.assign(new Error('half'), { statusCode: 418 }) })
  t.equal(statused.statusCode, 500)
  t.same(JSON.parse(statused.body.toString()).error, 'INTERNAL_ERROR', 'a status without a code')
  t.equal(decodeFailure('{"statusCode":500,"headers":{},"body":""}'), undefined, 'a record without the failed: mark')
})

t.test('a claimant gone with nothing stored: a request that can use what is stored claims again, it does not take the stale copy', async (t) => {
  const a = setup(entry(0))
  a.store(entry(-5))
  a.redis.claimsSay.push({ kind: 'held' }, { kind: 'claimed' })
  a.redis.looksSay.push({ stored: false, held: 'none' })
  const turn = a.fleet.turn(key, {}, entry(0), a.caller)
  await a.clock.tick(FLEET_POLL_MS)
  t.same(await turn, { kind: 'fetch' }, 'it claims the fetch')
  t.equal(a.redis.calls.filter((c) => c.startsWith('claim')).length, 2)
})
