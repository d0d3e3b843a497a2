import type { Test } from 'tap'
import { startRedis, type RedisServer } from '../helpers/redis.js'

/**
 * A redis-server as test/helpers/redis.ts starts it, requiring `password` (`requirepass`):
 * `url` is the one to give the sidecar, password included; `stop()`/`start()` as there.
 */
export async function startRedisWithPassword (t: Test, password: string): Promise<RedisServer> {
  return await startRedis(t, { password })
}
