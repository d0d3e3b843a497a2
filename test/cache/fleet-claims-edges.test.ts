// The fleet's claims at their edges (src/cache/fleet-fetch.ts createFleetClaims): a connection
// that is not ready sends nothing, a miss takes any entry stored however short its life, what a
// claim holds is a failure only under the failed: mark, and a look decides as the claim script
// does to the millisecond. Real Redis, but for that last: Redis's clock cannot be held still.
import t, { type Test } from 'tap'
import { Redis } from 'ioredis'
import { createFleetClaims, encodeFailure } from '../../src/cache/fleet-fetch.js'
import { startRedis } from '../helpers/redis.js'

const keys = { entryKey: (id: string) => `e:${id}`, claimKey: (id: string) => `c:${id}` }

async function connected (t: Test): Promise<Redis> {
  const server = await startRedis(t)
  const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
  t.teardown(() => { client.disconnect() })
  await client.connect()
  return client
}

t.test('a connection that is not ready: each command fails at once and sends nothing', async (t) => {
  const client = await connected(t)
  let up = false
  const claims = createFleetClaims({ client, ...keys, ready: () => { if (!up) throw new Error('not connected (reconnecting)') } })
  await t.rejects(claims.claim('k', 'fetch:a:1', -1), /not connected/)
  t.equal(await client.exists('c:k'), 0, 'no claim taken')
  up = true
  t.same(await claims.claim('k', 'fetch:a:1', -1), { kind: 'claimed' })
  await client.pexpire('c:k', 1_000)
  up = false
  await t.rejects(claims.renew('k', 'fetch:a:1'), /not connected/)
  t.ok(await client.pttl('c:k') <= 1_000, 'the lease not renewed')
  await t.rejects(claims.release('k', 'fetch:a:1', undefined), /not connected/)
  t.equal(await client.get('c:k'), 'fetch:a:1', 'the claim not released')
  await t.rejects(claims.look('k', -1), /not connected/)
})

t.test('a miss takes any entry stored, even one with under a second to live', async (t) => {
  const client = await connected(t)
  const claims = createFleetClaims({ client, ...keys, ready: () => {} })
  for (;;) {
    await client.del('c:k')
    await client.set('e:k', 'entry', 'PX', 999)
    const looked = await claims.look('k', -1)
    const claimed = await claims.claim('k', 'fetch:a:1', -1)
    // Still there after both (a lapse is for good): each saw it. On a machine too busy for that, again.
    if (await client.pttl('e:k') <= 0) continue
    t.same(looked, { stored: true, held: 'none' })
    t.same(claimed, { kind: 'stored' }, 'and the claim says the same')
    break
  }
})

t.test('a failure\'s record under any other mark (a later version\'s, say) is a live claim, not a failure', async (t) => {
  const client = await connected(t)
  const claims = createFleetClaims({ client, ...keys, ready: () => {} })
  const record = encodeFailure({ answer: { statusCode: 503, headers: {}, body: Buffer.from('down') } })
  for (const mark of ['FAILED:', 'failed;', 'future:']) {
    await client.set('c:k', record.replace(/^failed:/, mark))
    const claim = await claims.claim('k', 'fetch:a:1', -1)
    t.same(claim, { kind: 'held' }, mark)
    t.notOk('failure' in claim, `${mark}: no failure to pass on`)
    t.same(await claims.look('k', -1), { stored: false, held: 'live' }, `${mark}: a look sees a live claim`)
  }
})

/** A connection whose PTTL and GET answer as told. */
function answering (pttl: number): Redis {
  const pipeline = { pttl: () => pipeline, get: () => pipeline, exec: async () => [[null, pttl], [null, null]] }
  return { pipeline: () => pipeline } as unknown as Redis
}

t.test('a look decides as the claim script does, to the millisecond', async (t) => {
  const look = (pttl: number, knownLeftMs: number) => createFleetClaims({ client: answering(pttl), ...keys, ready: () => {} }).look('k', knownLeftMs)
  t.same(await look(1, -1), { stored: true, held: 'none' }, 'to a miss, an entry with 1 ms left is one')
  t.same(await look(0, -1), { stored: false, held: 'none' }, 'one in its last millisecond (PTTL 0) is none')
  t.same(await look(-2, -1), { stored: false, held: 'none' }, 'nor is a key that is gone')
  t.same(await look(6_001, 5_000), { stored: true, held: 'none' }, 'to a copy with 5 s left, one with more than a second longer is newer')
  t.same(await look(6_000, 5_000), { stored: false, held: 'none' }, 'one with exactly a second longer is not')
})
