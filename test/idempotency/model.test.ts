// The promise of idempotent routes against a model: two sidecars (each with its state
// directory) on one real Redis, callers retrying with random keys, bodies and timing, TI
// answering, hanging, cutting mid-answer, 401 and 429; Redis frozen and restarted empty;
// sidecars restarted; Redis stalled while a caller retries an order still at TI (an outside
// review's find: a timed-out take's release freed the original's key); one sidecar cut off from
// Redis or stalled while the other takes the key. After every step: TI never placed two orders with one key; every caller
// got a status line; a replay is TI's first answer byte for byte; an unknown outcome is never
// resent (TI's second order with the key would be a duplicate).
import fc from 'fast-check'
import t from 'tap'
import { build, startStandIn, type Built } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { startFaultProxy } from '../helpers/tcp-fault-proxy.js'
import { commitSeed } from '../helpers/seed.js'
import { tempDir } from '../helpers/temp-dir.js'
import { post, startTi, type Behaviour, type Reply } from './ti.js'

const ORDERS = '/v2/store/orders'
const SEED = commitSeed(process.env.FC_SEED, 36)
const TI_KINDS: Behaviour[] = [
  { kind: 'answer' }, { kind: 'answer' }, { kind: 'cut' }, { kind: 'hang' }, { kind: 'status', status: 401 }, { kind: 'status', status: 429 }
]

type Step =
  | { kind: 'call', sidecar: number, key: number, body: number, ti: number }
  | { kind: 'race', key: number, body: number, ti: number }
  | { kind: 'freeze' }
  | { kind: 'restart-redis' }
  | { kind: 'restart-sidecar', sidecar: number }
  /** An order held at TI; Redis frozen while the caller retries on the same sidecar (its take times out); thawed; a retry again. */
  | { kind: 'stall', sidecar: number, key: number, body: number }
  /** One sidecar cut off from Redis (connections refused) or stalled (nothing passes): a caller tries it, then the other, then it again once healed. */
  | { kind: 'partition', sidecar: number, how: 'cut' | 'stall', key: number, body: number }

const call = fc.record({ kind: fc.constant('call' as const), sidecar: fc.nat(1), key: fc.nat(3), body: fc.nat(1), ti: fc.nat(TI_KINDS.length - 1) })
const step: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: call, weight: 8 },
  { arbitrary: fc.record({ kind: fc.constant('race' as const), key: fc.nat(3), body: fc.nat(1), ti: fc.nat(TI_KINDS.length - 1) }), weight: 3 },
  { arbitrary: fc.constant({ kind: 'freeze' as const }), weight: 1 },
  { arbitrary: fc.constant({ kind: 'restart-redis' as const }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('restart-sidecar' as const), sidecar: fc.nat(1) }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('stall' as const), sidecar: fc.nat(1), key: fc.nat(3), body: fc.nat(1) }), weight: 1 },
  {
    arbitrary: fc.record({ kind: fc.constant('partition' as const), sidecar: fc.nat(1), how: fc.constantFrom('cut' as const, 'stall' as const), key: fc.nat(3), body: fc.nat(1) }),
    weight: 1
  }
)

t.test('no key is placed twice, through every fault; replays are TI\'s answer; every caller gets a status line', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t)
  const dirs = [tempDir('model-a-'), tempDir('model-b-')]
  const proxies = [await startFaultProxy(t, redis.port), await startFaultProxy(t, redis.port)]
  const env = (i: number): Record<string, string> => ({
    AUTH_URL: standIn.url,
    UPSTREAM_URL: ti.url,
    RATE_LIMITS: `POST ${ORDERS} idempotency=1h require-key`,
    // Each sidecar reaches Redis through a proxy of its own, so one can be cut off alone.
    RATE_LIMIT_REDIS_URL: `redis://127.0.0.1:${proxies[i]?.port ?? 0}`,
    RATE_LIMIT_REDIS_TIMEOUT_MS: '500',
    RATE_LIMIT_COOLDOWN_MS: '0',
    // Longer than a stall (a frozen Redis's 500 ms and the retries around it): the held order is still at TI.
    UPSTREAM_TIMEOUT_MS: '2000',
    STATE_DIR: dirs[i] ?? ''
  })
  const start = async (i: number): Promise<Built> => await build(t, env(i), { idempotencyTiming: { checkMs: 50, recoveryMs: 1500 } })
  const sidecars: Built[] = [await start(0), await start(1)]
  const queue: Behaviour[] = []
  ti.script(() => queue.shift() ?? { kind: 'answer' })
  const answers = new Map<string, Buffer>()
  let run = 0
  let stalls = 0
  const labels = new Map<string, number>()

  const check = (key: string, reply: Reply | undefined): void => {
    if (reply === undefined) throw new Error(`a caller with key ${key} got no status line`)
    const label = reply.headers['idempotent-replayed'] === 'true' ? 'replayed' : String(reply.status)
    labels.set(label, (labels.get(label) ?? 0) + 1)
    if (reply.headers['idempotent-replayed'] === 'true') {
      const first = answers.get(key)
      if (first === undefined || !first.equals(reply.body)) throw new Error(`key ${key}: a replay that is not TI's first answer`)
    } else if (reply.status === 201 && reply.headers['x-order-id'] !== undefined) {
      if (answers.has(key)) throw new Error(`key ${key}: TI answered twice`)
      answers.set(key, reply.body)
    }
    const twice = ti.duplicates()
    if (twice.length > 0) throw new Error(`TI placed two orders with one key: ${twice.join(', ')}`)
  }
  const order = async (i: number, key: string, body: number): Promise<Reply | undefined> =>
    await post(sidecars[i]?.proxyUrl ?? '', ORDERS, `{"sku":${body}}`, { 'idempotency-key': `"${key}"` }).catch(() => undefined)

  const property = fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 10 }), async (steps) => {
    run += 1
    for (const s of steps) {
      if (s.kind === 'call') {
        queue.push(TI_KINDS[s.ti] ?? { kind: 'answer' })
        const key = `r${run}-k${s.key}`
        check(key, await order(s.sidecar, key, s.body))
      } else if (s.kind === 'race') {
        queue.push(TI_KINDS[s.ti] ?? { kind: 'answer' })
        const key = `r${run}-k${s.key}`
        const replies = await Promise.all([order(0, key, s.body), order(1, key, s.body)])
        // The one TI answered first, then the other (its replay is checked against it).
        replies.sort((a, b) => Number(a?.headers['idempotent-replayed'] === 'true') - Number(b?.headers['idempotent-replayed'] === 'true'))
        for (const reply of replies) check(key, reply)
      } else if (s.kind === 'freeze') {
        redis.freeze()
        const key = `r${run}-frozen`
        const reply = await order(0, key, 0)
        redis.thaw()
        check(key, reply)
      } else if (s.kind === 'stall') {
        // A key of its own: one a former step holds would never reach TI.
        const key = `r${run}-stall${++stalls}`
        queue.length = 0
        queue.push({ kind: 'hold' })
        let answered = false
        const first = order(s.sidecar, key, s.body).finally(() => { answered = true })
        await eventually(t, 'the order at TI, or answered without it (Redis recovering)', () => ti.held() > 0 || answered)
        if (ti.held() === 0) {
          queue.length = 0
          check(key, await first)
          continue
        }
        redis.freeze()
        const retry = await order(s.sidecar, key, s.body)
        redis.thaw()
        check(key, retry)
        const again = await order(s.sidecar, key, s.body)
        ti.release()
        check(key, again)
        check(key, await first)
      } else if (s.kind === 'partition') {
        const key = `r${run}-k${s.key}`
        const proxy = proxies[s.sidecar]
        if (s.how === 'cut') await proxy?.cut()
        else proxy?.stall()
        queue.push({ kind: 'answer' })
        check(key, await order(s.sidecar, key, s.body))
        queue.push({ kind: 'answer' })
        check(key, await order(1 - s.sidecar, key, s.body))
        await proxy?.heal()
        queue.push({ kind: 'answer' })
        check(key, await order(s.sidecar, key, s.body))
      } else if (s.kind === 'restart-redis') {
        await redis.restart({ withData: false })
        // A new epoch, and its recovery window over: every sidecar has written its keys back.
        await eventually(t, 'the fleet wrote its keys back', async () => (await redis.command('KEYS', '*idem:epoch')).startsWith('*1') &&
          (await redis.command('KEYS', '*idem:recovering')).startsWith('*0'))
      } else {
        const old = sidecars[s.sidecar]
        await old?.app.close()
        sidecars[s.sidecar] = await start(s.sidecar)
      }
    }
    queue.length = 0
  })
  await fc.assert(property, { seed: SEED, numRuns: Number(process.env.FC_RUNS ?? 8), endOnFailure: true })
  t.same(ti.duplicates(), [], 'TI never placed two orders with one key')
  t.comment(`seed ${SEED}; answers seen: ${JSON.stringify(Object.fromEntries(labels))}`)
  t.ok((labels.get('replayed') ?? 0) + (labels.get('409') ?? 0) > 0, 'retries met held keys')
})
