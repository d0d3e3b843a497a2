// Budgets and cool-downs shared in a real Redis, and the fallback to memory
// when it is killed or slow: no caller ever sees an error, and it is said once each way.
import { createHash } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { startRedis, type RedisServer } from '../helpers/redis.js'
import { answer, backendOf, eventually, quotaSidecar, type QuotaSidecar } from './sidecar.js'

const RULE = '* /v2/store/**'

async function admin (t: Test, redis: RedisServer, password?: string): Promise<Redis> {
  const client = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 1, ...(password === undefined ? {} : { password }) })
  client.on('error', () => {})
  await client.connect()
  t.teardown(() => { client.disconnect() })
  return client
}

/**
 * A sidecar's first contact with Redis is bounded (1 s at least), then it goes on alone and
 * keeps trying: on a busy machine the contact may come after start.
 */
async function sharing (t: Test, s: QuotaSidecar, what = 'shared through Redis'): Promise<void> {
  await eventually(t, what, async () => (await backendOf(s)) === 'redis')
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
  await sharing(t, a)
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

t.test('Redis killed mid-run, then restarted empty: honest 429s while the tally cannot be known, one window refused after, said once each', async (t) => {
  const redis = await startRedis(t)
  const { a, upstream } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '2' }, redis.url)
  for (let i = 0; i < 5; i++) t.equal((await a.call(`/v2/store/${i}`, `before${i}`)).status, 200)
  await redis.stop()
  const during = []
  for (let i = 0; i < 5; i++) during.push(await a.call(`/v2/store/${i}`, `during${i}`))
  // Two sidecars: a's share is 500 a minute, spendable one window after Redis could last have
  // counted it present (timeout 200 ms + presence TTL 3 s): until then, nothing.
  t.same(during.map((d) => d.status), Array(5).fill(429), 'cut off: refused, not sent on a guess')
  t.ok(during.every((d) => d.headers['retry-after'] === '1'), `Retry-After: 1, Redis is asked again by then (${String(during[0]?.headers['retry-after'])})`)
  t.match(JSON.parse(during[0]?.body ?? '{}'), { error: 'UPSTREAM_RATE_LIMITED', message: /cannot be checked/ })
  t.equal(upstream.received.length, 5)
  t.equal(await backendOf(a), 'memory')
  const ready = await request(a.adminUrl + '/readyz')
  t.equal(ready.statusCode, 200)
  const readyBody = await ready.body.json() as { reason: string, rateLimits: { backend: string } }
  t.match(readyBody.reason, /rate limits not shared: redis redis:\/\/127\.0\.0\.1:\d+ .*each sidecar spends only its share \(fleet size 2\)/)
  t.equal(readyBody.rateLimits.backend, 'memory')
  t.match((await a.status()).rateLimits, { backend: 'memory', degraded: true, fleet: { size: 2 }, redis: { url: redis.url, up: false }, rules: [{ share: [500] }] })
  let m = await scrape(a.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_fallbacks_total', {})), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_up', {})), 0)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_degraded', {})), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_fleet_size', {})), 2)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_backend', { backend: 'memory' })), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limited_total', { rule: RULE, reason: 'degraded', action: 'refused' })), 5)

  await redis.start()
  await eventually(t, 'back on Redis', async () => (await backendOf(a)) === 'redis')
  const after = await a.call('/v2/store/z', 'after')
  t.equal(after.status, 429, 'Redis came back empty: the last minute\'s tally is lost, so the rule is refused for one window')
  t.ok(Number(after.headers['retry-after']) >= 59 && Number(after.headers['retry-after']) <= 60, String(after.headers['retry-after']))
  m = await scrape(a.adminUrl)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_up', {})), 1)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_degraded', {})), 0)
  t.equal(m.get(seriesKey('store_auth_proxy_rate_limit_redis_data_lost_total', {})), 1)
  const quotaLogs = a.logs.entries().filter((e) => e.component === 'quota')
  t.equal(quotaLogs.filter((e) => /redis unreachable, too slow or refusing/.test(String(e.msg))).length, 1, 'warned once')
  t.equal(quotaLogs.filter((e) => /lost its data/.test(String(e.msg))).length, 1, 'the lost tally said once')
  t.equal(quotaLogs.filter((e) => /answers again/.test(String(e.msg))).length, 1, 'recovery said once')
  t.equal(quotaLogs.find((e) => /unreachable/.test(String(e.msg)))?.level, 40)
})

t.test('a Redis slower than RATE_LIMIT_REDIS_TIMEOUT_MS: callers answered at once (429: the tally cannot be read), not held; its data kept, shared again after', async (t) => {
  const redis = await startRedis(t)
  const { a } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m`, RATE_LIMIT_REDIS_TIMEOUT_MS: '500', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '2' }, redis.url)
  const client = await admin(t, redis)
  await client.call('CLIENT', 'PAUSE', '3000', 'ALL')
  const started = performance.now()
  const seen = await a.call('/v2/store/slow', 'slow')
  t.equal(seen.status, 429)
  t.ok(performance.now() - started < 2000, 'not held for the pause')
  t.equal(await backendOf(a), 'memory')
  t.equal((await scrape(a.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_fallbacks_total', {})), 1)
  await eventually(t, 'back on Redis after the pause', async () => (await backendOf(a)) === 'redis')
  const fast = await a.call('/v2/store/fast', 'fast')
  t.equal(fast.status, 200, 'Redis kept its data: no window is lost', { body: fast.body, headers: fast.headers })
})

t.test('a Redis URL with a password: never in logs, /status, /readyz or /metrics, working or failing', async (t) => {
  const password = 'S3cretRedisPassw0rd'
  const redis = await startRedis(t)
  const client = await admin(t, redis)
  await client.config('SET', 'requirepass', password)
  const url = `redis://:${password}@127.0.0.1:${redis.port}`
  const { a } = await fleet(t, { RATE_LIMITS: `${RULE} 1000/1m` }, url)
  await sharing(t, a, 'authenticated')
  const wrong = await quotaSidecar(t, {}, { redisUrl: `redis://app:wrong-${password}@127.0.0.1:${redis.port}`, systemClock: true })
  t.equal(await backendOf(wrong), 'memory')
  t.match((await wrong.status()).rateLimits, { redis: { problem: /^redis refused our credentials \((WRONGPASS|NOAUTH)\)/ } }, 'a wrong password is named as such')
  await redis.stop()
  t.equal((await a.call('/v2/store/x', 'x')).status, 429, 'Redis gone and no RATE_LIMIT_FLEET_SIZE: refused, not guessed')
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

t.test('RATE_LIMIT_REDIS_URL_FILE is re-read before each reconnection: a rotated password is used without a restart, and neither is ever shown', async (t) => {
  const [first, second] = ['Rotat3dPasswordOne', 'Rotat3dPasswordTwo']
  const redis = await startRedis(t)
  const client = await admin(t, redis)
  await client.config('SET', 'requirepass', first)
  const dir = t.testdir({ url: `redis://:${first}@127.0.0.1:${redis.port}\n` })
  const file = `${dir}/url`
  const s = await quotaSidecar(t, { RATE_LIMITS: `${RULE} 1000/1m`, RATE_LIMIT_REDIS_URL_FILE: file, RATE_LIMIT_FLEET_SIZE: '1' }, { systemClock: true })
  await sharing(t, s)
  // Rotation: Redis takes the new password, the file gets it, connections are cut.
  await client.config('SET', 'requirepass', second)
  writeFileSync(file, `redis://:${second}@127.0.0.1:${redis.port}\n`)
  await client.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')
  // The sidecar learns of the cut when its socket closes, a moment after the kill: until then
  // /status still says "shared", and a call in that moment is decided alone (a fleet of one
  // refuses in its first window). Wait for it to notice before waiting for it to be back.
  const fallbacks = async (): Promise<number | undefined> =>
    (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_fallbacks_total', {}))
  await eventually(t, 'the cut is noticed', async () => await fallbacks() === 1)
  await eventually(t, 'shared again with the new password', async () => {
    const r = (await s.status()).rateLimits as { backend: string, redis: { problem: string | null } }
    return r.backend === 'redis' && r.redis.problem === null
  })
  const rotated = await s.call('/v2/store/rotated', 'rotated')
  t.equal(rotated.status, 200, 'answered through Redis on the new password', { body: rotated.body })
  const shown = [s.logs.text(), JSON.stringify(await s.status()), await (await request(s.adminUrl + '/readyz')).body.text()].join('\n')
  for (const secret of [first, second]) t.notMatch(shown, secret)
})
