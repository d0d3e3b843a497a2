// Each take of a key is a claim of its own, also in the fleet's Redis: a request gives back or
// settles only the key it took, never one another request of the same sidecar holds, and a
// pending key written by an older sidecar (its owner the bare process id) is nobody's to free.
import { randomUUID } from 'node:crypto'
import { pino } from 'pino'
import t from 'tap'
import { systemClock } from '../../src/clock.js'
import { createMemoryStore } from '../../src/idempotency/memory-store.js'
import { createRedisKeyStore } from '../../src/idempotency/redis-store.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { build, CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { codeOf, post, startTi } from './ti.js'

const ORDERS = '/v2/store/orders'
const HOUR = 3_600_000

t.test('a retry whose take times out gives back only its own claim: the order in flight keeps its key', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t)
  const sidecar = await build(t, {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: ti.url,
    RATE_LIMITS: `POST ${ORDERS} idempotency=24h require-key`,
    RATE_LIMIT_REDIS_URL: redis.url,
    RATE_LIMIT_REDIS_TIMEOUT_MS: '300'
  }, { idempotencyTiming: { checkMs: 50, recoveryMs: 300 } })
  const prefix = redisKeyPrefix(standIn.url, CLIENT_ID)
  await eventually(t, 'the recovery window ends', async () =>
    await redis.command('EXISTS', `${prefix}idem:epoch`) === ':1' && await redis.command('PTTL', `${prefix}idem:recovering`) === ':-2')

  let first = true
  ti.script(() => { if (first) { first = false; return { kind: 'hold' } } return { kind: 'answer' } })
  const headers = { 'idempotency-key': '"po-42"' }
  // The order: at TI, not answered yet (its caller's own timeout would fire about now).
  const original = post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers)
  await eventually(t, 'TI holds the order', () => ti.held() === 1)

  // A retry while Redis stalls for longer than RATE_LIMIT_REDIS_TIMEOUT_MS: its take times out.
  redis.freeze()
  const stalled = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers)
  redis.thaw()
  t.equal(codeOf(stalled), 'IDEMPOTENCY_UNAVAILABLE', 'the stalled retry: 503')
  // Its give-back reaches Redis once it answers again.
  await new Promise((resolve) => setTimeout(resolve, 300))

  const retry = await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers)
  t.equal(codeOf(retry), 'IDEMPOTENCY_KEY_IN_USE', 'the original is still in flight')
  t.equal(ti.orders.length, 1, 'TI received the order once')
  ti.release()
  t.equal((await original).status, 201)
  t.equal((await post(sidecar.proxyUrl, ORDERS, '{"sku":1}', headers)).headers['idempotent-replayed'], 'true', 'then its answer is replayed')
  t.same(ti.duplicates(), [], 'no key placed twice')
})

t.test('the scripts: a pending key is settled or released only by its claim; an older sidecar\'s is held', async (t) => {
  const redis = await startRedis(t)
  const prefix = 'claims-test:'
  const mirror = createMemoryStore({ clock: systemClock })
  const store = createRedisKeyStore({
    connection: { url: redis.url, timeoutMs: 2000 },
    prefix,
    clock: systemClock,
    log: pino({ level: 'silent' }),
    mirror,
    timing: { checkMs: 50, recoveryMs: 1 }
  })
  await store.start()
  t.teardown(() => store.close())
  await new Promise((resolve) => setTimeout(resolve, 20)) // past the recovery window of a new epoch
  const now = Date.now()
  const processId = randomUUID()
  const pending = (owner: string) => ({ state: 'pending' as const, fingerprint: 'fp', owner, deadline: now + 60_000, expiresAt: now + HOUR })
  const unknown = { state: 'unknown' as const, fingerprint: 'fp', expiresAt: now + HOUR }

  t.same(await store.take('k', pending(`${processId}:1`)), { kind: 'taken' })
  t.equal(await store.release('k', `${processId}:2`), false, 'another claim of the same process does not release it')
  t.equal(await store.settle('k', `${processId}:2`, unknown), false, 'nor settles it')
  t.equal(await store.release('k', processId), false, 'nor does the bare process id')
  t.equal(await store.release('k', ''), false, 'nor an empty owner')
  t.equal(await redis.command('HGET', `${prefix}idem:k:k`, 'owner'), `${processId}:1`, 'still held by its claim')
  t.equal(await store.release('k', `${processId}:1`), true, 'its own claim releases it')

  // Written by a sidecar from before claims: its owner is the bare process id.
  await redis.command('HSET', `${prefix}idem:k:old`, 'state', 'pending', 'fp', 'fp', 'owner', processId,
    'deadline', String(now + 60_000), 'expiresAt', String(now + HOUR))
  t.equal(await store.release('old', `${processId}:1`), false, 'no claim of this sidecar releases it')
  t.equal(await store.settle('old', `${processId}:1`, unknown), false, 'nor settles it')
  t.equal((await store.take('old', pending(`${processId}:3`))).kind, 'held', 'held until its deadline')
  t.equal(await store.release('old'), true, 'an operator still releases any key')
})
