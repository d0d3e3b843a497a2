// The fleet's fetch claims in a real Redis (src/cache/fleet-fetch.ts createFleetClaims): who
// claims, what another finds, a newer entry stored instead, the lease renewed and released
// only by its own value, a failure left in the claim's place for a moment, and what a look
// sees. fleet-fetch.test.ts drives the same decisions against a scripted Redis.
import t from 'tap'
import { Redis } from 'ioredis'
import { createFleetClaims, FAILURE_SHOWN_MS, LEASE_MS } from '../../src/cache/fleet-fetch.js'
import { startRedis } from '../helpers/redis.js'

const IGNORE_STORED = -2

t.test('claims, renewals, releases and looks, as Redis keeps them', async (t) => {
  const server = await startRedis(t)
  const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
  t.teardown(() => { client.disconnect() })
  await client.connect()
  let readied = 0
  const claims = createFleetClaims({ client, entryKey: (id) => `e:${id}`, claimKey: (id) => `c:${id}`, ready: () => { readied++ } })

  t.same(await claims.look('k', -1), { stored: false, held: 'none' }, 'nothing yet')
  t.same(await claims.claim('k', 'fetch:a:1', -1), { kind: 'claimed' }, 'the first claims')
  const lease = await client.pttl('c:k')
  t.ok(lease > LEASE_MS - 1_000 && lease <= LEASE_MS, `a lease of LEASE_MS (${lease} ms left)`)
  const another = await claims.claim('k', 'fetch:b:1', -1)
  t.same(another, { kind: 'held' }, 'another finds it held')
  t.notOk('failure' in another, 'a live claim, no failure')
  t.equal(await client.get('c:k'), 'fetch:a:1', 'and takes nothing from it')
  t.same(await claims.look('k', -1), { stored: false, held: 'live' })

  await client.pexpire('c:k', 1_000)
  const before = readied
  await claims.renew('k', 'fetch:b:1')
  t.equal(readied, before + 1, 'a renewal asks the connection to be ready')
  t.ok(await client.pttl('c:k') <= 1_000, 'another\'s value renews nothing')
  await claims.renew('k', 'fetch:a:1')
  t.ok(await client.pttl('c:k') > 1_000, 'its own value renews the lease')

  await claims.release('k', 'fetch:b:1', undefined)
  t.equal(await client.get('c:k'), 'fetch:a:1', 'another\'s value releases nothing')
  await claims.release('k', 'fetch:a:1', undefined)
  t.equal(await client.get('c:k'), null, 'its own releases it')
  t.same(await claims.look('k', -1), { stored: false, held: 'none' })

  t.same(await claims.claim('k', 'fetch:a:2', -1), { kind: 'claimed' })
  const answer = { statusCode: 504, headers: { 'content-type': 'text/plain' }, body: Buffer.from('slow') }
  await claims.release('k', 'fetch:b:1', { answer })
  t.equal(await client.get('c:k'), 'fetch:a:2', 'a failure from another\'s value is not left either')
  await claims.release('k', 'fetch:a:2', { answer })
  t.match(await client.get('c:k'), /^failed:/, 'its failure takes the claim\'s place')
  t.ok(await client.pttl('c:k') <= FAILURE_SHOWN_MS, 'for FAILURE_SHOWN_MS')
  const held = await claims.claim('k', 'fetch:b:2', -1)
  t.same(held, { kind: 'held', failure: { answer } }, 'a claim meanwhile gets the failure')
  const looked = await claims.look('k', -1)
  t.same(looked, { stored: false, held: { answer } }, 'and so does a look')

  // A newer entry stored: a miss (-1) is told so; a copy with about as long to live is not.
  await client.set('e:n', 'entry', 'PX', 10_000)
  t.same(await claims.claim('n', 'fetch:a:3', -1), { kind: 'stored' }, 'a miss finds the stored entry')
  t.same(await claims.look('n', -1), { stored: true, held: 'none' })
  t.same(await claims.claim('n', 'fetch:a:4', 9_500), { kind: 'claimed' }, 'a copy with as long to live claims the refresh')
  t.same(await claims.look('n', 9_500), { stored: false, held: 'live' }, 'and the stored one is no news to it')
  t.same(await claims.look('n', 5_000), { stored: true, held: 'live' }, 'to a copy with 5 s left it is newer')
  t.same(await claims.look('n', 0), { stored: true, held: 'live' }, 'to a copy at its end too')
  await client.set('e:m', 'entry', 'PX', 800)
  t.same(await claims.look('m', 0), { stored: false, held: 'none' }, 'one with under NEWER_BY_MS to live is no newer than a copy at its end')
  t.same(await claims.look('n', 20_000), { stored: false, held: 'live' }, 'not to one with longer to live')
  await claims.release('n', 'fetch:a:4', undefined)
  t.same(await claims.claim('n', 'fetch:a:5', IGNORE_STORED), { kind: 'claimed' }, 'a value it cannot use is no newer entry')
  t.same(await claims.look('n', IGNORE_STORED), { stored: false, held: 'live' })
  t.ok(readied >= 20, 'every command asks the connection to be ready first')
})

t.test('a look through a failing connection throws, for the waiter to fetch by itself', async (t) => {
  const server = await startRedis(t)
  const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
  t.teardown(() => { client.disconnect() })
  await client.connect()
  await client.set('e:w', 'not a number of ms')
  await client.lpush('c:w', 'a list, not a claim')
  const claims = createFleetClaims({ client, entryKey: (id) => `e:${id}`, claimKey: (id) => `c:${id}`, ready: () => {} })
  await t.rejects(claims.look('w', -1), /WRONGTYPE/)
})
