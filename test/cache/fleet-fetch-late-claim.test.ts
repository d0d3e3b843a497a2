// A claim that Redis runs after the sidecar gave up on it (a frozen or paused Redis catching
// up) must not hold the key: once it ran, the fleet's next miss waited a whole lease (5 s)
// for a fetch nobody made (the quota model, seed -746856561 group 1: a cached call answered
// in 3,993 ms). Real Redis, paused with CLIENT PAUSE so that the claim times out here and runs
// when the pause ends, on the sidecar's own connection settings.
import t from 'tap'
import { Redis } from 'ioredis'
import { systemClock } from '../../src/clock.js'
import { createFleetClaims, createFleetFetch, LEASE_MS } from '../../src/cache/fleet-fetch.js'
import type { CacheKey } from '../../src/cache/policy.js'
import { startRedis } from '../helpers/redis.js'

t.test('a claim that timed out and ran late is held as its fetch\'s own and released with it: the next request claims at once', async (t) => {
  const server = await startRedis(t)
  const client = new Redis(server.url, { commandTimeout: 100, maxRetriesPerRequest: 0, enableOfflineQueue: false, lazyConnect: true })
  const admin = new Redis(server.url, { lazyConnect: true })
  t.teardown(() => { client.disconnect(); admin.disconnect() })
  await client.connect()
  await admin.connect()
  const claims = createFleetClaims({ client, entryKey: (id) => `e:${id}`, claimKey: (id) => `c:${id}`, ready: () => {} })
  const failures: string[] = []
  const fleet = createFleetFetch({ claims, clock: systemClock, fillMs: 10_000, find: async () => ({ entry: undefined }), failed: (_err, what) => { failures.push(what) } })
  t.teardown(() => { fleet.close() })
  const key = { id: 'catalog', display: '/c' } as unknown as CacheKey
  const caller = { destroyed: false, once: () => caller, removeListener: () => caller }

  await admin.call('CLIENT', 'PAUSE', '400', 'ALL')
  t.same(await fleet.turn(key, {}, undefined, caller), { kind: 'fetch' }, 'the claim timed out: this request fetches by itself')
  t.same(failures, ['a fetch claim'])
  // A reply on the same connection means the pause is over and the claim, sent before, has
  // run (one connection's commands run in order).
  for (;;) if (await client.ping().then(() => true, () => false)) break
  t.match(await admin.get('c:catalog'), /^fetch:/, 'the claim ran late: it is this fetch\'s own')
  fleet.ended(key.id, { entry: undefined, standsIn: false })
  for (;;) if (await client.ping().then(() => true, () => false)) break
  t.equal(await admin.get('c:catalog'), null, 'released when the fetch ended: no claim is left holding the key')
  const started = performance.now()
  t.same(await fleet.turn(key, {}, undefined, caller), { kind: 'fetch' }, 'the next request claims the fetch')
  t.ok(performance.now() - started < LEASE_MS / 2, 'at once, not after a lease')
  t.match(await admin.get('c:catalog'), /^fetch:/, 'its own claim holds now')
})
