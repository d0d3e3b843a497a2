// A send counts from when its request is written, not from its admission: sends admitted a
// window apart that wait to leave (for an upstream connection, for the STATE_DIR ledger
// write) must not reach TI together. Through the built sidecar, embedded and through Redis
// (a fleet of one), each with its control (nothing to wait for).
import { execFileSync } from 'node:child_process'
import { createReadStream } from 'node:fs'
import { mkdir, mkdtemp, rm, unlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { startSidecar } from '../helpers/build.js'
import { fillPool, get, mostIn, sleep, SLOW_MS, startUpstream, untilShared } from './late-upstream.js'
import { startRedis } from '../helpers/redis.js'

/**
 * `GET /x 2/1s`: two sends, then two more 300 ms later that wait (RATE_LIMIT_MAX_WAIT_MS) for
 * the first to leave the window. With the pool full, all four wait for a connection until the
 * slow calls end; whatever is admitted must reach TI at most two in a window.
 */
async function queuedBehindSlowCalls (t: Test, saturate: boolean, redisUrl?: string) {
  const upstream = await startUpstream(t)
  const env: Record<string, string> = redisUrl === undefined ? {} : { RATE_LIMIT_REDIS_URL: redisUrl, RATE_LIMIT_FLEET_SIZE: '1' }
  const sidecar = await startSidecar(t, upstream.url, { RATE_LIMITS: 'GET /x 2/1s', RATE_LIMIT_MAX_WAIT_MS: '1000', ...env })
  if (redisUrl !== undefined) await untilShared(sidecar.adminUrl)
  const slow = saturate ? await fillPool(sidecar.proxyUrl, upstream) : []
  const first = [get(`${sidecar.proxyUrl}/x`), get(`${sidecar.proxyUrl}/x`)]
  await sleep(300)
  const second = [get(`${sidecar.proxyUrl}/x`), get(`${sidecar.proxyUrl}/x`)]
  const statuses = await Promise.all([...first, ...second])
  await Promise.all(slow)
  t.comment(`statuses ${statuses.join(',')}; arrivals (ms from the first) ${upstream.arrivals.map((a) => Math.round(a - (upstream.arrivals[0] ?? 0))).join(',')}`)
  return { statuses, arrivals: upstream.arrivals }
}

// 900 ms: TI may see sends that left a window apart a little closer (the network).
const SLACK_WINDOW_MS = 900

t.test('embedded: sends that waited for a connection reach TI at most N in a window', async (t) => {
  const { arrivals } = await queuedBehindSlowCalls(t, true)
  t.ok(mostIn(arrivals, SLACK_WINDOW_MS) <= 2, `most in ${SLACK_WINDOW_MS} ms: ${mostIn(arrivals, SLACK_WINDOW_MS)} (limit 2/1s)`)
  t.ok(arrivals.length >= 2, 'the first two went')
})

t.test('control, embedded: nothing to wait for, all four go, two a window apart', async (t) => {
  const { statuses, arrivals } = await queuedBehindSlowCalls(t, false)
  t.same(statuses, [200, 200, 200, 200])
  t.ok(mostIn(arrivals, SLACK_WINDOW_MS) <= 2)
})

t.test('through Redis (a fleet of one): sends that waited for a connection reach TI at most N in a window', async (t) => {
  const redis = await startRedis(t)
  const { arrivals } = await queuedBehindSlowCalls(t, true, redis.url)
  t.ok(mostIn(arrivals, SLACK_WINDOW_MS) <= 2, `most in ${SLACK_WINDOW_MS} ms: ${mostIn(arrivals, SLACK_WINDOW_MS)} (limit 2/1s)`)
  t.ok(arrivals.length >= 2, 'the first two went')
})

t.test('control, through Redis: nothing to wait for, all four go, two a window apart', async (t) => {
  const redis = await startRedis(t)
  const { statuses, arrivals } = await queuedBehindSlowCalls(t, false, redis.url)
  t.same(statuses, [200, 200, 200, 200])
  t.ok(mostIn(arrivals, SLACK_WINDOW_MS) <= 2)
})

t.test("through Redis: a send that waited for a connection is in Redis's log from when it left", async (t) => {
  const redis = await startRedis(t)
  const client = new Redis(redis.url, { lazyConnect: true })
  await client.connect()
  t.teardown(() => { client.disconnect() })
  const upstream = await startUpstream(t)
  const sidecar = await startSidecar(t, upstream.url, { RATE_LIMITS: 'GET /x 2/1s', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_FLEET_SIZE: '1' })
  await untilShared(sidecar.adminUrl)
  const slow = await fillPool(sidecar.proxyUrl, upstream)
  const [seconds, micros] = await client.time()
  const asked = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
  t.equal(await get(`${sidecar.proxyUrl}/x`), 200)
  await Promise.all(slow)
  const logs = await client.keys('*:log:2/1s:*')
  t.equal(logs.length, 1, 'one log, of the rule\'s limit')
  // Fire and forget: the re-time reaches Redis just after the send.
  const log = logs[0] as string
  const [id] = await client.zrange(log, '0', '-1')
  let score = 0
  for (let i = 0; i < 50 && score - asked < SLOW_MS - 1_000; i++) {
    score = Number(await client.zscore(log, id as string))
    await sleep(20)
  }
  t.ok(score - asked >= SLOW_MS - 1_000, `scored ${score - asked} ms after it was asked for (it waited about ${SLOW_MS} ms for a connection)`)
})

t.test('STATE_DIR: sends held by a stalled ledger write reach TI at most N in a window once it returns', async (t) => {
  const upstream = await startUpstream(t)
  const dir = await mkdtemp(join(tmpdir(), 'late-sends-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  await mkdir(join(dir, 'quota'))
  // A FIFO where the write's temporary file goes: opening it blocks until the test reads it.
  const fifo = join(dir, 'quota', 'ledger.json.tmp')
  execFileSync('mkfifo', [fifo])
  const sidecar = await startSidecar(t, upstream.url, { RATE_LIMITS: 'GET /x 5/1s', STATE_DIR: dir })
  const all = Array.from({ length: 5 }, () => get(`${sidecar.proxyUrl}/x`))
  await sleep(1_100)
  all.push(...Array.from({ length: 5 }, () => get(`${sidecar.proxyUrl}/x`)))
  await sleep(1_900)
  const reader = createReadStream(fifo)
  reader.once('open', () => { void unlink(fifo) })
  reader.resume()
  const statuses = await Promise.all(all)
  const arrivals = upstream.arrivals
  t.comment(`statuses ${statuses.join(',')}; arrivals (ms from the first) ${arrivals.map((a) => Math.round(a - (arrivals[0] ?? 0))).join(',')}`)
  t.ok(mostIn(arrivals, SLACK_WINDOW_MS) <= 5, `most in ${SLACK_WINDOW_MS} ms: ${mostIn(arrivals, SLACK_WINDOW_MS)} (limit 5/1s)`)
  t.ok(arrivals.length >= 5, 'the first five went once the write returned')
})
