// The fleet's Redis side on a real redis-server, as the script tests drive it: the store (its
// clock read, ready for scripts with deadlines) and an operator's client to look at the keys.
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { systemClock } from '../../src/clock.js'
import { createRedisStore, type RedisStore } from '../../src/quota/redis-backend.js'
import { startRedis, type FaultyRedis } from '../helpers/redis.js'

export async function fleetRedis (t: Test, prefix: string, timeoutMs = 2_000): Promise<{ server: FaultyRedis, store: RedisStore, admin: Redis }> {
  const server = await startRedis(t)
  const store = createRedisStore({ url: server.url, timeoutMs, prefix, clock: systemClock })
  t.teardown(() => store.close())
  t.ok(await store.connect(), 'connected')
  await store.readClock()
  const admin = new Redis({ port: server.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
  admin.on('error', () => {})
  t.teardown(() => { admin.disconnect() })
  return { server, store, admin }
}
