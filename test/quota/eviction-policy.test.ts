// The budgets' side of an evicting Redis: a Redis that may evict keys under memory pressure is
// found at each connection and reported — a warning, a /readyz note (still ready), /status,
// rate_limit_redis_evicting — with a real redis-server at a small maxmemory, filled by other
// keys under allkeys-lru and volatile-lru; noeviction is not reported; a CONFIG GET refused by
// an ACL leaves the policy unknown (-1), said once, nothing breaks.
import t from 'tap'
import { request } from 'undici'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { startRedis } from '../helpers/redis.js'
import { eventually, quotaSidecar } from './sidecar.js'

const LOST = /rate-limit redis is new or lost its data/
const ENV = { RATE_LIMITS: 'GET /v2/store/** 3/6s', RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '2000' }

for (const policy of ['allkeys-lru', 'volatile-lru']) {
  t.test(`maxmemory 2 MiB, ${policy}, filled by other keys: reported in the log, /readyz (still ready), /status and the metric`, async (t) => {
    const redis = await startRedis(t)
    await redis.command('CONFIG', 'SET', 'maxmemory', String(2 * 1024 * 1024))
    await redis.command('CONFIG', 'SET', 'maxmemory-policy', policy)
    for (let i = 0; i < 40; i++) await redis.command('SET', `other:${i}`, 'x'.repeat(64 * 1024), 'EX', '3600')
    const s = await quotaSidecar(t, ENV, { redisUrl: redis.url, systemClock: true })
    await eventually(t, 'the policy read', async () => ((await s.status()).rateLimits as { redis: { maxmemoryPolicy: string | null } }).redis.maxmemoryPolicy === policy)
    t.match((await s.status()).rateLimits, { redis: { maxmemoryPolicy: policy, evicting: true } })
    const ready = await request(s.adminUrl + '/readyz')
    t.equal(ready.statusCode, 200, 'still ready')
    const reason = String((await ready.body.json() as { reason?: string }).reason)
    t.match(reason, new RegExp(`rate-limit redis evicts keys under memory pressure \\(maxmemory-policy ${policy}\\)`))
    // volatile-* evicts only keys with a TTL: the tally has none; allkeys-* may take it.
    t.match(reason, policy === 'allkeys-lru' ? /budgets may be under-counted/ : /budgets are safe/, 'what is at risk, for this policy')
    t.equal((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_evicting', {})), 1)
    t.match(s.logs.entries().filter((e) => /may evict keys/.test(String(e.msg))), [{ level: 40, maxmemoryPolicy: policy, maxmemory: 2 * 1024 * 1024 }], 'said once')
    // volatile-lru cannot take a budget key (none has a TTL). allkeys-lru may have taken any,
    // its epoch too: Redis's LRU clock ticks once a second, so the budgets' keys are no younger
    // than the filler's. A lost epoch refuses budgets for a window, saying so (below).
    const seen = await s.call('/v2/store/x', 'x')
    if (policy === 'volatile-lru') t.equal(seen.status, 200, 'budgets still shared')
    else t.ok(seen.status === 200 || (seen.status === 429 && LOST.test(seen.body)), `shared, or refused as lost data (${seen.status})`)
  })
}

t.test('an epoch evicted (allkeys-* may take any key): refused for a window as lost data, not as Redis silent; then shared again', async (t) => {
  const redis = await startRedis(t)
  const s = await quotaSidecar(t, { ...ENV, RATE_LIMITS: 'GET /v2/store/** 3/1s' }, { redisUrl: redis.url, systemClock: true })
  await eventually(t, 'shared', async () => (await s.call('/v2/store/x', 'first')).status === 200)
  t.equal(await redis.command('EVAL', "local n = 0 for _, k in ipairs(redis.call('KEYS', '*:epoch')) do n = n + redis.call('DEL', k) end return n", '0'), ':1', 'the epoch evicted')
  const refused = await s.call('/v2/store/x', 'after')
  t.equal(refused.status, 429)
  t.match(refused.body, LOST, 'says Redis lost its data')
  t.equal(s.upstream.seen('after').length, 0, 'not sent')
  await eventually(t, 'shared again, a window later', async () => (await s.call('/v2/store/x', 'again')).status === 200)
})

t.test('noeviction, or no maxmemory: nothing to report', async (t) => {
  for (const [maxmemory, policy] of [['2097152', 'noeviction'], ['0', 'allkeys-lru']] as const) {
    const redis = await startRedis(t)
    await redis.command('CONFIG', 'SET', 'maxmemory', maxmemory)
    await redis.command('CONFIG', 'SET', 'maxmemory-policy', policy)
    const s = await quotaSidecar(t, ENV, { redisUrl: redis.url, systemClock: true })
    await eventually(t, 'the policy read', async () => ((await s.status()).rateLimits as { redis: { maxmemoryPolicy: string | null } }).redis.maxmemoryPolicy === policy)
    t.match((await s.status()).rateLimits, { redis: { evicting: false } }, `${maxmemory} ${policy}`)
    t.equal((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_evicting', {})), 0)
    t.equal(s.logs.entries().filter((e) => /evict|maxmemory-policy/.test(String(e.msg))).length, 0)
    t.notMatch(await (await request(s.adminUrl + '/readyz')).body.text(), /evicts/)
  }
})

t.test('CONFIG GET refused by an ACL (a managed Redis): unknown, said once, budgets shared', async (t) => {
  const redis = await startRedis(t)
  await redis.command('ACL', 'SETUSER', 'sap', 'on', '>pw', '~*', '+@all', '-config')
  const url = redis.url.replace('redis://', 'redis://sap:pw@')
  const s = await quotaSidecar(t, ENV, { redisUrl: url, systemClock: true })
  await eventually(t, 'the refusal met', async () => (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_redis_evicting', {})) === -1)
  t.match((await s.status()).rateLimits, { backend: 'redis', redis: { maxmemoryPolicy: null, evicting: null } })
  t.match(s.logs.entries().filter((e) => /CONFIG GET refused/.test(String(e.msg))), [{ level: 30 }])
  t.equal((await s.call('/v2/store/x', 'x')).status, 200)
})
