// Review of the read cache: what reaches Redis, /status, Cache-Status and the logs. Regression
// tests failed on the code reviewed (each defect fixed since); PROBE tests passed on it.
import t from 'tap'
import { Redis } from 'ioredis'
import { CLIENT_SECRET } from '../helpers/build.js'
import { startRedis } from '../helpers/redis.js'
import { startTi } from '../cache/fixture.js'
import { fleetSidecar } from '../cache/fleet-ready.js'

const ENV = { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' }
const REDIS_PASSWORD = 'redis-pw-S3cret-4711'
const CALLER_SECRET = 'callers-own-credential-0815'

async function storedValues (url: string): Promise<string> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, lazyConnect: true })
  await client.connect()
  try {
    const keys = await client.keys('*cache:*')
    const values = await Promise.all(keys.map(async (k) => (await client.getBuffer(k))?.toString('latin1') ?? ''))
    return `${keys.join('\n')}\n${values.join('\n')}`
  } finally {
    client.disconnect()
  }
}

t.test('Regression: TI\'s Vary: Authorization puts the caller\'s own Authorization value, in clear, into the entry in Redis', async (t) => {
  const redis = await startRedis(t, { password: REDIS_PASSWORD })
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { vary: 'Authorization' }, body: 'the catalog' }))
  const s = await fleetSidecar(t, ti, ENV, { redisUrl: redis.url, systemClock: true })
  const first = await s.get('/v2/store/a', { authorization: `Bearer ${CALLER_SECRET}` })
  t.match(first.headers['cache-status'], '; stored')
  let stored = ''
  for (let i = 0; i < 100 && !stored.includes('the catalog'); i++) {
    stored = await storedValues(redis.url)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  t.match(stored, 'the catalog', 'the entry is in Redis')
  t.notMatch(stored, CALLER_SECRET, 'a caller\'s credential is never written to Redis')
})

t.test('PROBE: the sidecar\'s token, client secret and Redis password are in no Redis value, /status, Cache-Status or log line', async (t) => {
  const redis = await startRedis(t, { password: REDIS_PASSWORD })
  const ti = await startTi(t)
  const s = await fleetSidecar(t, ti, ENV, { redisUrl: redis.url, systemClock: true })
  const first = await s.get('/v2/store/a?customer=jane')
  const token = String(ti.received[0]?.headers.authorization).replace(/^Bearer /, '')
  t.ok(token.length > 8, 'TI got a token')
  let stored = ''
  for (let i = 0; i < 100 && !stored.includes('PART-1'); i++) {
    stored = await storedValues(redis.url)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  const hit = await s.get('/v2/store/a?customer=jane')
  t.match(hit.headers['cache-status'], '; hit')
  // Redis frozen: a lookup times out and is logged.
  redis.freeze()
  t.teardown(() => { redis.thaw() })
  await s.get('/v2/store/b')
  redis.thaw()
  const status = JSON.stringify(await s.status())
  const seen = {
    redis: stored, status, headers: JSON.stringify([first.headers, hit.headers]), logs: s.logs.text()
  }
  t.match(s.logs.text(), 'read cache: a lookup in redis failed', 'the failure was logged')
  for (const [where, text] of Object.entries(seen)) {
    for (const [what, secret] of [['token', token], ['client secret', CLIENT_SECRET], ['redis password', REDIS_PASSWORD]]) {
      t.notMatch(text, secret as string, `no ${String(what)} in ${where}`)
    }
  }
  t.notMatch(status, 'jane', 'no query value in /status')
  t.notMatch(stored, /authorization/i, 'no request Authorization field stored')
})
