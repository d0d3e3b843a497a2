// The compose fleet profile's Redis user (deploy/demo-secrets/redis.conf): the sidecar's own
// Redis store, with the URL the sidecars read, takes budgets and cool-downs through it,
// while everything else the user might try is refused. A real redis-server with that file.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { Redis } from 'ioredis'
import { systemClock } from '../../src/clock.js'
import { createRedisStore, redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { REDIS, skipFileUnless } from '../helpers/tools.js'

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

/** redis-server with the compose file's config on a free loopback port, until teardown. */
async function redisWithComposeConfig (): Promise<string> {
  const p = await port()
  const child = spawn('redis-server', [CONF, '--port', String(p), '--bind', '127.0.0.1'], { stdio: ['ignore', 'pipe', 'inherit'] })
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
  t.match(joined, { late: false, lost: false, present: 1 }, 'registered (TIME, GET, SET, ZADD, ZREMRANGEBYSCORE, ZCARD, PTTL, PEXPIRE)')
  member.epoch = joined.epoch
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-1'), { code: 'ok' }, 'a budget taken (EVALSHA/EVAL, sorted sets)')
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-2'), { code: 'budget' }, 'then spent (ZRANGE)')
  await store.refund('GET /catalog', [limit], 'send-1')
  t.match(await store.take(member, 'GET /catalog', [limit], 'send-3'), { code: 'ok' }, 'a refund given back (ZREM)')
  t.match(await store.heartbeat(member, ['GET /catalog']), { code: 'ok' }, 'a heartbeat')
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
