// Attack, end to end: what TI receives when a sidecar restarts while it cannot reach Redis.
// Three sidecars with RATE_LIMIT_FLEET_SIZE=3 and `GET /v2/store/products/** 6/1h` on one
// Redis send 2 each (the whole budget). A restarts and the new A cannot reach Redis (a
// partition; its connection is refused): it sends its share of 2 at once. TI receives 8
// calls in one window of 6/1h; at no moment ran more than 3 sidecars, and Redis lost nothing.
import { once } from 'node:events'
import { createServer } from 'node:net'
import t from 'tap'
import { startStandIn } from '../../helpers/build.js'
import { startRecordingUpstream } from '../../helpers/recording-upstream.js'
import { startRedis } from '../../helpers/redis.js'
import { backendOf, DAY, eventually, quotaSidecar } from '../sidecar.js'

/** A loopback port nothing listens on. */
async function closedPort (): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  await new Promise<void>((resolve) => server.close(() => { resolve() }))
  return typeof address === 'object' && address !== null ? address.port : 0
}

t.test('TI receives no more than the budget when a sidecar restarts cut off from Redis', async (t) => {
  const redis = await startRedis(t)
  const authUrl = (await startStandIn(t, { tokenLifetimeMs: 3 * DAY })).url
  const upstream = await startRecordingUpstream(t)
  const env = { RATE_LIMITS: 'GET /v2/store/products/** 6/1h', RATE_LIMIT_FLEET_SIZE: '3', ACCESS_LOG: 'false' }
  const fleet = []
  for (const name of ['a', 'b', 'c']) {
    const s = await quotaSidecar(t, env, { redisUrl: redis.url, authUrl, upstream, systemClock: true })
    await eventually(t, `sidecar ${name} on redis`, async () => await backendOf(s) === 'redis')
    fleet.push(s)
  }
  const statuses: number[] = []
  for (const s of fleet) for (let i = 0; i < 2; i++) statuses.push((await s.call('/v2/store/products/list', `${statuses.length}`)).status)
  t.same(statuses, [200, 200, 200, 200, 200, 200], 'the whole budget, through Redis')

  await fleet[0]?.app.close() // A restarts
  const again = await quotaSidecar(t, env, { redisUrl: `redis://127.0.0.1:${await closedPort()}`, authUrl, upstream, systemClock: true })
  for (let i = 0; i < 2; i++) await again.call('/v2/store/products/list', `again-${i}`)
  const received = upstream.received.filter((r) => r.url.startsWith('/v2/store/products/')).length
  t.ok(received <= 6, `TI received ${received} calls in one window of 6/1h`)
})
