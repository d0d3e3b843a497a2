// The compose fleet profile's Redis user (deploy/demo-secrets/redis.conf): the sidecar's own
// Redis store, with the URL the sidecars read, takes budgets and cool-downs through it,
// while everything else the user might try is refused. A real redis-server with that file.
// Then two whole sidecars on it, using every feature that keeps state in Redis (budgets, the
// fleet's fetch claims, cached answers, invalidation by pub/sub, idempotent orders): Redis's
// own ACL LOG must show no command refused. (It once did: the cache's scripts were refused and
// every sidecar quietly kept its own copies, so the fleet fetched the catalog once per pod.)
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout } from 'node:timers/promises'
import t from 'tap'
import { Redis } from 'ioredis'
import { systemClock } from '../../src/clock.js'
import { createRedisStore, redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { REDIS, skipFileUnless } from '../helpers/tools.js'
import { CATALOG, DAY, catalogBody, startTi } from '../cache/fixture.js'

skipFileUnless(t, REDIS)

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

const CONF = join(ROOT, 'deploy/demo-secrets/redis.conf')
const composeUrl = readFileSync(join(ROOT, 'deploy/demo-secrets/redis_url'), 'utf8').trim()

async function port (): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const address = server.address()
  await new Promise((resolve) => server.close(resolve))
  return typeof address === 'object' && address !== null ? address.port : 0
}

/** A user of the test's own, beside the file's, that may read Redis's ACL LOG. */
const READER = { user: 'acl-reader', password: 'acl-reader-password' }

/** redis-server with the compose file's config on a free loopback port, until teardown. */
async function redisWithComposeConfig (): Promise<string> {
  const p = await port()
  const child = spawn('redis-server', [
    CONF, '--port', String(p), '--bind', '127.0.0.1', '--user', READER.user, 'on', `>${READER.password}`, '+acl|log', '+info'
  ], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill('SIGKILL') })
  let seen = ''
  for await (const chunk of child.stdout.setEncoding('utf8')) {
    seen += String(chunk)
    if (seen.includes('Ready to accept connections')) break
  }
  child.stdout.resume()
  // The compose URL's user and password, at this server.
  const url = new URL(composeUrl)
  url.host = `127.0.0.1:${p}`
  return url.toString()
}

t.test('the sidecars\' user: budgets and cool-downs work, nothing else does', async (t) => {
  t.equal(new URL(composeUrl).username, 'store-auth-proxy', 'the compose URL names the sidecars\' user, not default')
  const url = await redisWithComposeConfig()
  const prefix = redisKeyPrefix('http://stand-in:8081', 'demo-client')
  const store = createRedisStore({ url, timeoutMs: 2_000, prefix, clock: systemClock })
  t.teardown(store.close)
  t.ok(await store.connect(), 'connects (AUTH, CLIENT SETNAME, INFO)')
  t.ok(await store.ping(), 'PING')
  await store.readClock()
  const limit = { count: 1, windowMs: 60_000, text: '1/1m' }
  const member = { id: 'acl-test', presenceTtlMs: 3_000, fleetFloor: 1, epoch: '' }
  const joined = await store.reassert(member, [{ scope: 'GET /catalog', limit, sends: [] }], 'epoch')
  t.match(joined, { late: false, lost: false, present: 1 }, 'registered (TIME, GET, SET, ZADD, ZREMRANGEBYSCORE, ZCARD, ZREM, DEL)')
  member.epoch = joined.epoch
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-1'), { code: 'ok' }, 'a budget taken (EVALSHA/EVAL, sorted sets, the latest send: HSET)')
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-2'), { code: 'budget' }, 'then spent (ZRANGE, HGET, EXISTS, MGET)')
  await store.refund('GET /catalog', [limit], 'send-1')
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-3'), { code: 'ok' }, 'a refund given back (ZREM, HDEL)')
  await t.resolves(store.leaving('GET /catalog', [limit], 'send-3'), 'a send timed from when it left (ZADD GT CH, HGET, HSET)')
  t.match(await store.heartbeat(member, ['GET /catalog']), { code: 'ok' }, 'a heartbeat')
  // A sidecar that lapses and is released when the fleet is whole again; one that leaves.
  const brief = { id: 'acl-brief', presenceTtlMs: 20, fleetFloor: 2, epoch: member.epoch }
  t.match(await store.heartbeat(brief, []), { code: 'ok' }, 'a brief presence')
  await setTimeout(60)
  const arriving = { id: 'acl-new', presenceTtlMs: 3_000, fleetFloor: 2, epoch: member.epoch }
  t.match(await store.reassert(arriving, [{ scope: 'GET /catalog', limit, sends: [] }], 'epoch'), { late: false, present: 2 }, 'the fleet whole again: the lapsed one released')
  await store.leave(arriving)
  t.ok(await store.coolDown('GET /catalog', { retryAfterMs: undefined, baseMs: 1_000, maxMs: 60_000 }) > 0, 'a cool-down set (SET PX)')

  const raw = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0 })
  t.teardown(() => { raw.disconnect() })
  await raw.connect()
  for (const [what, run] of [
    ['FLUSHALL', async () => await raw.flushall()],
    ['KEYS', async () => await raw.keys('*')],
    ['CONFIG GET', async () => await raw.config('GET', 'requirepass')],
    ['SCRIPT FLUSH', async () => await raw.script('FLUSH')],
    ['a key outside the prefix', async () => await raw.set('other', '1')],
    ['KEYS from a script', async () => await raw.eval("return redis.call('KEYS', '*')", 0)]
  ] as const) {
    await t.rejects(run(), /NOPERM|can't run this command/, `${what}: refused`)
  }
  const anonymous = new Redis(url.replace(/\/\/[^@]+@/, '//'), { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  const errors: string[] = []
  anonymous.on('error', (err: Error) => { errors.push(err.message) })
  t.teardown(() => { anonymous.disconnect() })
  await t.rejects(async () => { await anonymous.connect(); await anonymous.get(`${prefix}x`) }, 'no default user: a connection without one gets nothing')
  t.match(errors.join('\n'), /NOAUTH/, '... for want of a user')
})

/** What Redis refused since it started, by user, command or key, and where (`toplevel`, `lua`). */
async function aclLog (url: string): Promise<string[]> {
  const reader = new URL(url)
  reader.username = READER.user
  reader.password = READER.password
  const client = new Redis(reader.toString(), { lazyConnect: true, maxRetriesPerRequest: 0 })
  try {
    await client.connect()
    const entries = await client.call('ACL', 'LOG', '128') as unknown[][]
    return entries.map((entry) => {
      const fields = new Map<string, unknown>()
      for (let i = 0; i < entry.length; i += 2) fields.set(String(entry[i]), entry[i + 1])
      return `${String(fields.get('username'))}: ${String(fields.get('reason'))} ${String(fields.get('object'))} (${String(fields.get('context'))})`
    })
  } finally {
    client.disconnect()
  }
}

t.test('two sidecars with every Redis feature on the sidecars\' user: Redis refuses nothing they send', async (t) => {
  const url = await redisWithComposeConfig()
  t.same(await aclLog(url), [], 'a new server: nothing refused yet')
  const ti = await startTi(t)
  ti.answer((seen) => seen.method === 'POST'
    ? { status: 201, headers: { 'content-type': 'application/json' }, body: '{"orderId":"T-1"}' }
    : { status: 200, headers: { 'content-type': 'application/json' }, body: catalogBody() })
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const env = {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: ti.url,
    RATE_LIMIT_REDIS_URL: url,
    RATE_LIMIT_REDIS_TIMEOUT_MS: '2000',
    RATE_LIMIT_FLEET_SIZE: '2',
    RATE_LIMIT_MAX_WAIT_MS: '0',
    // The compose fleet's rules, and an order rule as the orders profile has it.
    RATE_LIMITS: `GET ${CATALOG} 1/4h 6/1d cache=4h stale=1d; POST /v2/store/orders idempotency=24h require-key; GET /v2/store/products/* 15/1m`
  }
  const deps = { quotaTiming: { freshGraceMs: 0 }, idempotencyTiming: { checkMs: 50, recoveryMs: 300 } }
  const [a, b] = [await build(t, env, deps), await build(t, env, deps)]
  const status = async (adminUrl: string): Promise<{ rateLimits?: { backend?: string } }> =>
    await (await fetch(`${adminUrl}/status`)).json() as { rateLimits?: { backend?: string } }
  for (const s of [a, b]) await eventually(t, 'the sidecar on redis', async () => (await status(s.adminUrl)).rateLimits?.backend === 'redis')
  const get = async (base: string, path: string, headers: Record<string, string> = {}) => {
    const res = await fetch(base + path, { headers })
    return { status: res.status, cacheStatus: res.headers.get('cache-status') ?? '', body: await res.text() }
  }

  const fetched = await get(a.proxyUrl, CATALOG)
  t.match(fetched, { status: 200, cacheStatus: /fwd=miss; fwd-status=200; stored/ }, 'a fetches the catalog and stores it (a fetch claim taken and released)')
  const hit = await get(b.proxyUrl, CATALOG)
  t.match(hit, { status: 200, cacheStatus: /store-auth-proxy; hit/ }, 'b has it from Redis')
  t.equal(hit.body, fetched.body, '... the same bytes')
  const refused = await get(b.proxyUrl, CATALOG, { 'cache-control': 'no-cache' })
  t.match(refused, { status: 200, cacheStatus: /detail=no-refresh-budget/ }, 'b asked for TI\'s answer: the budget refuses, the stored one stands in')
  t.equal(ti.received.filter((r) => r.url === CATALOG).length, 1, 'TI saw one catalog call for the fleet')
  t.equal((await get(a.proxyUrl, '/v2/store/products/LM358BIDR')).status, 200, 'a budgeted product call')

  // An unsafe method on the catalog's URI drops it fleet-wide (pub/sub, RFC 9111 §4.4).
  t.equal((await fetch(a.proxyUrl + CATALOG, { method: 'DELETE' })).status, 200, 'an unsafe method through a')

  const order = async (base: string) => await fetch(base + '/v2/store/orders', {
    method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': '"acl-1"' }, body: '{"sku":1}'
  })
  let placed = 0
  await eventually(t, 'an idempotent order placed once the new Redis\'s recovery window ends', async () => {
    placed = (await order(a.proxyUrl)).status
    return placed === 201
  })
  const replay = await order(b.proxyUrl)
  t.equal(replay.status, 201, 'the same key through b: TI\'s answer, replayed')
  t.equal(replay.headers.get('idempotent-replayed'), 'true')
  t.equal(ti.received.filter((r) => r.method === 'POST' && r.url === '/v2/store/orders').length, 1, 'TI got the order once')

  // CONFIG GET (maxmemory-policy) is refused on purpose: the sidecars then say it is unknown.
  t.same(await aclLog(url), ['store-auth-proxy: command config|get (toplevel)'],
    'Redis refused no command, key or channel the sidecars sent, but the CONFIG GET the file denies')
  const failures = [...a.logs.entries(), ...b.logs.entries()].filter((e) => /redis.*failed|NOPERM|can't run/i.test(JSON.stringify(e)))
  t.same(failures, [], 'no sidecar logged a failed Redis call')
})
