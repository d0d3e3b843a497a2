// Keys shared by the fleet: two sidecars on one real Redis; Redis away (503, never a guess),
// restarted empty (refused while the fleet writes its keys back), a sidecar gone mid-request.
import t, { type Test } from 'tap'
import { build, CLIENT_ID, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { tempDir } from '../helpers/temp-dir.js'
import { fingerprint, keyId } from '../../src/idempotency/key.js'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { codeOf, post, startTi, type Reply } from './ti.js'

const ORDERS = '/v2/store/orders'
const RULE = `POST ${ORDERS}`
const TIMING = { checkMs: 50, recoveryMs: 300 }

async function fleet (t: Test, count = 2, env: Record<string, string> = {}) {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t)
  const base = {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: ti.url,
    RATE_LIMITS: `${RULE} idempotency=24h require-key`,
    RATE_LIMIT_REDIS_URL: redis.url,
    RATE_LIMIT_COOLDOWN_MS: '0',
    // A busy machine: a slow Redis answer is a 503, tested on its own below.
    RATE_LIMIT_REDIS_TIMEOUT_MS: '2000',
    ...env
  }
  const start = async (extra: Record<string, string> = {}) => await build(t, { ...base, ...extra }, { idempotencyTiming: TIMING })
  const sidecars = []
  for (let i = 0; i < count; i++) sidecars.push(await start())
  const prefix = redisKeyPrefix(standIn.url, CLIENT_ID)
  /** Waits out a recovery window (a new Redis has one too): an epoch, and no window left. */
  const settled = async (): Promise<void> => {
    await eventually(t, 'the recovery window ends', async () =>
      await redis.command('EXISTS', `${prefix}idem:epoch`) === ':1' && await redis.command('PTTL', `${prefix}idem:recovering`) === ':-2')
  }
  await settled()
  return { redis, ti, sidecars, start, prefix, settled }
}

const order = async (url: string, key: string, body = '{"sku":1}'): Promise<Reply> => await post(url, ORDERS, body, { 'idempotency-key': `"${key}"` })

t.test('the same key on two sidecars at once: TI gets one order, the other caller 409 or the replay', async (t) => {
  const { ti, sidecars } = await fleet(t)
  for (let round = 0; round < 5; round++) {
    const replies = await Promise.all(sidecars.map(async (s) => await order(s.proxyUrl, `k${round}`)))
    const statuses = replies.map((r) => r.status).sort()
    t.ok(statuses.includes(201), `round ${round}: one placed (${statuses.join(', ')})`)
    t.ok(replies.every((r) => r.status === 201 || codeOf(r) === 'IDEMPOTENCY_KEY_IN_USE'), 'the other waited or got the replay')
  }
  t.same(ti.duplicates(), [], 'TI never got two orders with one key')
})

t.test('a retry on another sidecar gets TI\'s stored answer byte for byte', async (t) => {
  const { ti, sidecars: [a, b] } = await fleet(t)
  ti.script(() => ({ kind: 'answer', status: 202, headers: { 'x-ti': 'y' }, body: '{"orderId":"Z-9","bytes":"\\u00e9"}' }))
  const first = await order(a!.proxyUrl, 'x')
  const retry = await order(b!.proxyUrl, 'x')
  t.equal(retry.status, 202)
  t.same(retry.body, first.body)
  t.equal(retry.headers['x-ti'], 'y')
  t.equal(retry.headers['idempotent-replayed'], 'true')
  const other = await order(b!.proxyUrl, 'x', '{"sku":2}')
  t.equal(codeOf(other), 'IDEMPOTENCY_KEY_REUSED')
  t.equal(ti.orders.length, 1)
})

t.test('Redis away: 503 IDEMPOTENCY_UNAVAILABLE, nothing sent; back: keys are checked again', async (t) => {
  const { redis, ti, sidecars: [a], settled } = await fleet(t)
  await order(a!.proxyUrl, 'before')
  await redis.stop()
  const refused = await order(a!.proxyUrl, 'during')
  t.equal(refused.status, 503)
  t.equal(codeOf(refused), 'IDEMPOTENCY_UNAVAILABLE')
  t.ok(Number(refused.headers['retry-after']) >= 1)
  t.equal(ti.orders.length, 1, 'nothing sent while the key cannot be checked')
  redis.freeze()
  redis.thaw()
  await redis.start()
  await settled()
  const retry = await order(a!.proxyUrl, 'before')
  t.equal(retry.headers['idempotent-replayed'], 'true', 'the key this sidecar held is written back to the emptied Redis')
  t.equal(ti.orders.length, 1)
})

t.test('Redis restarted empty: refused while the fleet writes its keys back, then every key held again', async (t) => {
  const { redis, ti, sidecars: [a, b], settled } = await fleet(t)
  await order(a!.proxyUrl, 'placed-on-a')
  ti.script(() => ({ kind: 'cut' }))
  await order(b!.proxyUrl, 'cut-on-b').catch(() => undefined)
  await redis.restart({ withData: false })
  await eventually(t, 'a sidecar refuses during the recovery window', async () => codeOf(await order(b!.proxyUrl, 'new-key')) === 'IDEMPOTENCY_UNAVAILABLE')
  await settled()
  t.equal((await order(b!.proxyUrl, 'placed-on-a')).headers['idempotent-replayed'], 'true', 'A\'s key, replayed by B')
  t.equal(codeOf(await order(a!.proxyUrl, 'cut-on-b')), 'ORDER_OUTCOME_UNKNOWN', 'B\'s unknown outcome, held by A')
  t.same(ti.duplicates(), [])
})

t.test('a sidecar gone mid-request: its key is held as unknown once its deadline passed', async (t) => {
  const { redis, ti, sidecars: [a], prefix } = await fleet(t, 1)
  const body = '{"sku":1}'
  const id = keyId(RULE, 'orphan')
  const now = Date.now()
  await redis.command('HSET', `${prefix}idem:k:${id}`, 'state', 'pending', 'fp', fingerprint('POST', ORDERS, Buffer.from(body)),
    'owner', 'a-dead-process', 'deadline', String(now + 60_000), 'expiresAt', String(now + 3_600_000))
  t.equal(codeOf(await order(a!.proxyUrl, 'orphan', body)), 'IDEMPOTENCY_KEY_IN_USE', 'before its deadline: in flight')
  await redis.command('HSET', `${prefix}idem:k:${id}`, 'deadline', String(now - 1))
  t.equal(codeOf(await order(a!.proxyUrl, 'orphan', body)), 'ORDER_OUTCOME_UNKNOWN')
  t.equal(await redis.command('HGET', `${prefix}idem:k:${id}`, 'state'), 'unknown', 'held as unknown from then on')
  t.equal(ti.orders.length, 0)
})

t.test('with STATE_DIR and Redis, an outcome unknown at a crash is unknown for the fleet after the restart', async (t) => {
  const stateDir = tempDir('orders-')
  const { ti, sidecars: [b], start, settled } = await fleet(t, 1)
  const a = await start({ STATE_DIR: stateDir })
  await settled()
  ti.script(() => ({ kind: 'hold' }))
  const pending = order(a.proxyUrl, 'crash').catch(() => undefined)
  await eventually(t, 'TI holds the order', () => ti.held() === 1)
  // A second process on the same state directory: the first "crashed" with the order out.
  await start({ STATE_DIR: stateDir })
  t.equal(codeOf(await order(b!.proxyUrl, 'crash')), 'ORDER_OUTCOME_UNKNOWN', 'at once, not after the deadline')
  ti.release()
  await pending
  t.equal(ti.orders.length, 1)
})
