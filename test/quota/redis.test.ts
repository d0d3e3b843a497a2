// Budgets and cool-downs shared in a real Redis (issue 14 §3), and the fallback to memory
// when it is killed or slow: no caller ever sees an error, and it is said once each way.
import { createHash } from 'node:crypto'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { startRedis, type RedisServer } from '../helpers/redis.js'
import { answer, backendOf, eventually, quotaSidecar } from './sidecar.js'

const RULE = '* /v2/store/**'

async function admin (t: Test, redis: RedisServer, password?: string): Promise<Redis> {
  const client = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1, ...(password === undefined ? {} : { password }) })
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return client
}

/** Two sidecars on one credential (one AUTH_URL and CLIENT_ID), one upstream, one Redis. */
async function fleet (t: Test, env: Record<string, string>, redisUrl: string) {
  const standIn = await startStandIn(t)
  const upstream = await startRecordingUpstream(t)
  const options = { redisUrl, authUrl: standIn.url, upstream, systemClock: true }
  const a = await quotaSidecar(t, env, options)
  const b = await quotaSidecar(t, env, options)
  return { a, b, upstream, authUrl: standIn.url }
}

t.test('two sidecars on one credential share one budget, under concurrent load', async (t) => {
  const redis = await startRedis(t)
  const { a, b, upstream } = await fleet(t, { RATE_LIMITS: `${RULE} 5/1m`, RATE_LIMIT_MAX_WAIT_MS: '0' }, redis.url)
  t.equal(await backendOf(a), 'redis')
  const calls = Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? a : b).call(`/v2/store/${i}`, `c${i}`))
  const statuses = (await Promise.all(calls)).map((r) => r.status)
  t.equal(statuses.filter((s) => s === 200).length, 5, 'five sends in all')
  t.equal(statuses.filter((s) => s === 429).length, 15)
  t.equal(upstream.received.length, 5)
  const refused = await a.call('/v2/store/x', 'late')
  t.ok(Number(refused.headers['retry-after']) >= 59 && Number(refused.headers['retry-after']) <= 60, String(refused.headers['retry-after']))
  const m = await scrape(a.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_backend', { backend: 'redis' })), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_backend', { backend: 'memory' })), 0)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_up', {})), 1)
})

t.test('keys: store-auth-proxy: + 16 hex of sha256(AUTH_URL \\n CLIENT_ID); a 429 with Retry-After: 5 cools down every sidecar', async (t) => {
  const redis = await startRedis(t)
  const { a, b, upstream, authUrl } = await fleet(t, {}, redis.url)
  upstream.plan('limited', { kind: 'answer', answer: answer(429, [['Retry-After', '5']], '') })
  t.equal((await a.call('/v2/store/x', 'limited')).status, 429)
  const prefix = `store-auth-proxy:${createHash('sha256').update(`${authUrl}\n${CLIENT_ID}`).digest('hex').slice(0, 16)}:`
  const client = await admin(t, redis)
  await eventually(t, 'the cool-down in Redis', async () => (await client.pttl(`${prefix}cooldown:upstream`)) > 0)
  const local = await b.call('/v2/store/y', 'other-sidecar')
  t.equal(local.status, 429)
  t.ok(['4', '5'].includes(String(local.headers['retry-after'])), String(local.headers['retry-after']))
  t.same(upstream.seen('other-sidecar'), [])
  t.match(((await b.status()).rateLimits as { cooldowns: unknown[] }).cooldowns, [{ rule: 'upstream' }], 'the other sidecar shows it')
})

t.test('Redis killed mid-run: no caller error, fallback said once, /readyz stays 200; shared again when it returns', async (t) => {
  const redis = await startRedis(t)
  const { a, upstream } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m` }, redis.url)
  const statuses: number[] = []
  for (let i = 0; i < 5; i++) statuses.push((await a.call(`/v2/store/${i}`, `before${i}`)).status)
  await redis.stop()
  for (let i = 0; i < 20; i++) statuses.push((await a.call(`/v2/store/${i}`, `during${i}`)).status)
  t.same(statuses, Array(25).fill(200), 'every caller answered by the upstream')
  t.equal(upstream.received.length, 25)
  t.equal(await backendOf(a), 'memory')
  const ready = await request(a.adminUrl + '/readyz')
  t.equal(ready.statusCode, 200)
  const readyBody = await ready.body.json() as { reason: string, rateLimits: { backend: string } }
  t.match(readyBody.reason, /rate limits in memory per sidecar: redis redis:\/\/127\.0\.0\.1:\d+ unreachable/)
  t.equal(readyBody.rateLimits.backend, 'memory')
  t.match((await a.status()).rateLimits, { backend: 'memory', redis: { url: redis.url, up: false } })
  let m = await scrape(a.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_fallbacks_total', {})), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_up', {})), 0)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_backend', { backend: 'memory' })), 1)

  await redis.start()
  await eventually(t, 'back on Redis', async () => (await backendOf(a)) === 'redis')
  t.equal((await a.call('/v2/store/z', 'after')).status, 200)
  m = await scrape(a.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_up', {})), 1)
  const quotaLogs = a.logs.entries().filter((e) => e.component === 'quota')
  t.equal(quotaLogs.filter((e) => /redis unreachable or too slow/.test(String(e.msg))).length, 1, 'warned once')
  t.equal(quotaLogs.filter((e) => /answers again/.test(String(e.msg))).length, 1, 'recovery said once')
  t.equal(quotaLogs.find((e) => /unreachable/.test(String(e.msg)))?.level, 40)
})

t.test('a Redis slower than RATE_LIMIT_REDIS_TIMEOUT_MS: callers answered from memory, not held', async (t) => {
  const redis = await startRedis(t)
  const { a } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m`, RATE_LIMIT_REDIS_TIMEOUT_MS: '100' }, redis.url)
  const client = await admin(t, redis)
  await client.call('CLIENT', 'PAUSE', '3000', 'ALL')
  const started = performance.now()
  const seen = await a.call('/v2/store/slow', 'slow')
  t.equal(seen.status, 200)
  t.ok(performance.now() - started < 2000, 'not held for the pause')
  t.equal(await backendOf(a), 'memory')
  t.equal((await scrape(a.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_fallbacks_total', {})), 1)
  await eventually(t, 'back on Redis after the pause', async () => (await backendOf(a)) === 'redis')
})

t.test('a Redis URL with a password: never in logs, /status, /readyz or /metrics, working or failing', async (t) => {
  const password = 'S3cretRedisPassw0rd'
  const redis = await startRedis(t)
  const client = await admin(t, redis)
  await client.config('SET', 'requirepass', password)
  const url = `redis://:${password}@127.0.0.1:${redis.port}`
  const { a } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m` }, url)
  t.equal(await backendOf(a), 'redis', 'authenticated')
  const wrong = await quotaSidecar(t, {}, { redisUrl: `redis://app:wrong-${password}@127.0.0.1:${redis.port}`, systemClock: true })
  t.equal(await backendOf(wrong), 'memory')
  t.equal((await wrong.call('/v2/store/x', 'w')).status, 200)
  await redis.stop()
  t.equal((await a.call('/v2/store/x', 'x')).status, 200)
  for (const s of [a, wrong]) {
    const shown = [
      s.logs.text(),
      JSON.stringify(await s.status()),
      await (await request(s.adminUrl + '/readyz')).body.text(),
      await (await request(s.adminUrl + '/metrics')).body.text()
    ].join('\n')
    t.notMatch(shown, password)
    t.match(shown, `redis://127.0.0.1:${redis.port}`)
  }
})
