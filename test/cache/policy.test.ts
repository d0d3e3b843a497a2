// The read cache's pure parts: what may be stored and for how long, the key, Cache-Status,
// and an entry's way through Redis and its standing over time.
import t from 'tap'
import { asksForFresh, cacheKey, cacheStatus, decide, directives, displayPath, requestCacheable, varyMatches, withUpstream } from '../../src/cache/policy.js'
import { createMemoryStore, decodeEntry, encodeEntry, ENTRY_BYTES, entrySize, FIELD_BYTES, standing } from '../../src/cache/entries.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { entry } from './entry.js'

const HOUR = 3_600_000
const U = 'https://store.example/base'
const option = { freshMs: HOUR, staleMs: 2 * HOUR }

t.test('decide: only 200s TI lets a shared cache store; cache= bounded by TI\'s freshness', async (t) => {
  const ok = (headers: Record<string, string> = {}, status = 200) => decide(option, '/p', {}, status, headers)
  t.same(ok(), { store: true, freshMs: HOUR, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] })
  for (const status of [201, 203, 204, 206, 301, 404, 410, 500]) t.same(ok({}, status), { store: false, why: 'status' }, `${status}`)
  t.same(ok({ 'cache-control': 'No-Store' }), { store: false, why: 'no-store' })
  t.same(ok({ 'cache-control': 'public, private="x"' }), { store: false, why: 'private' })
  t.same(ok({ 'cache-control': 'no-cache' }), { store: false, why: 'no-cache' })
  t.same(ok({ 'set-cookie': 'a=1' }), { store: false, why: 'set-cookie' })
  t.same(ok({ vary: 'Accept, *' }), { store: false, why: 'vary' })
  t.same(ok({ 'cache-control': 'max-age=60' }), { store: true, freshMs: 60_000, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] })
  t.same(ok({ 'cache-control': 's-maxage=30, max-age=600' }), { store: true, freshMs: 30_000, staleMs: 0, initialAgeMs: 0, vary: [] }, 's-maxage rules a shared cache, and forbids stale')
  t.same(ok({ 'cache-control': 's-maxage=30' }).store && ok({ 'cache-control': 's-maxage=30' }), { store: true, freshMs: 30_000, staleMs: 0, initialAgeMs: 0, vary: [] }, 's-maxage alone')
  t.same(ok({ date: 'Mon, 23 Nov 2026 00:00:00 GMT', expires: 'Mon, 23 Nov 2026 00:01:00 GMT' }),
    { store: true, freshMs: 60_000, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] }, 'Expires alone: its distance from Date')
  t.same(ok({ 'cache-control': 'max-age=7200' }), { store: true, freshMs: HOUR, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] }, 'cache= is the most')
  t.same(ok({ 'cache-control': 'max-age=60', age: '50' }), { store: true, freshMs: 10_000, staleMs: 2 * HOUR, initialAgeMs: 50_000, vary: [] })
  t.same(ok({ 'cache-control': 'max-age=60, must-revalidate' }), { store: true, freshMs: 60_000, staleMs: 0, initialAgeMs: 0, vary: [] })
  t.same(ok({ 'cache-control': 'proxy-revalidate' }), { store: true, freshMs: HOUR, staleMs: 0, initialAgeMs: 0, vary: [] })
  t.same(ok({ 'cache-control': 'max-age=0' }), { store: true, freshMs: 0, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] }, 'stale at once, still a stand-in')
  t.same(decide({ freshMs: HOUR, staleMs: 0 }, '/p', {}, 200, { 'cache-control': 'max-age=0' }), { store: false, why: 'expired' })
  t.same(ok({ expires: 'Thu, 01 Jan 1970 00:00:00 GMT', date: new Date().toUTCString() }).store, true, 'an Expires in the past: stale at once')
  const tenant = decide(option, '/p', { 'x-tenant': 'a', accept: 'x', authorization: 'Bearer caller' }, 200, { vary: 'Accept, X-Tenant, X-None, Authorization, Host' })
  t.same(tenant.store && tenant.vary.map(([n, d]) => [n, d === '' ? '' : 'digest']), [['x-tenant', 'digest'], ['x-none', '']],
    'Authorization and Host are the sidecar\'s own: not keyed')
  t.notMatch(JSON.stringify(tenant), /"a"|caller/, 'a value is kept only as a digest')
  t.ok(tenant.store && varyMatches(tenant.vary, { 'x-tenant': 'a' }))
  t.notOk(tenant.store && varyMatches(tenant.vary, { 'x-tenant': 'b' }))
  t.notOk(tenant.store && varyMatches(tenant.vary, { 'x-tenant': 'a', 'x-none': '' }), 'present, even empty, is not absent')
  t.same(decide(option, '/p', { authorization: 'Bearer ours' }, 200, {}).store, true, 'the sidecar\'s own Authorization does not stop it')
  t.same(decide(option, '/p', { 'cache-control': 'no-store' }, 200, {}), { store: false, why: 'no-store' }, 'the request\'s no-store')
})

t.test('keys, display, directives and Cache-Status', async (t) => {
  const base = cacheKey(U, '/v2/a?x=1', {})
  t.equal(base.id.length, 32)
  t.not(cacheKey(U, '/v2/a?x=2', {}).id, base.id)
  t.not(cacheKey(U, '/v2/a?x=1', { accept: 'a' }).id, base.id)
  t.not(cacheKey(U, '/v2/a?x=1', { 'accept-language': 'a' }).id, base.id)
  t.not(cacheKey(U, '/v2/a?x=1', { 'accept-encoding': 'a' }).id, base.id)
  t.not(cacheKey(U, '/v2/a?x=1', { accept: ['a', 'b'] }).id, cacheKey(U, '/v2/a?x=1', { accept: 'a' }).id)
  t.equal(cacheKey(U, '/v2/a?x=1', { 'x-other': 'y' }).id, base.id)
  t.not(cacheKey(U, '/v2/a', { accept: '\na' }).id, cacheKey(U, '/v2/a\na', {}).id, 'fields cannot run into each other')
  t.not(cacheKey('https://sandbox.example/base', '/v2/a?x=1', {}).id, base.id, 'another upstream: another key')
  t.equal(displayPath('/v2/a'), '/v2/a')
  t.equal(displayPath('/v2/a?customer=jane&&page=2&flag=x'), '/v2/a?customer=…&page=…&flag=…')
  t.equal(displayPath('/v2/a?jane.doe@example.com'), '/v2/a?…', 'a field without = is all value')
  t.same([...directives('max-age="60", No-Cache, private=x=y')], [['max-age', '60'], ['no-cache', true], ['private', 'x=y']])
  t.same([...directives(['a', 'b=1'])], [['a', true], ['b', '1']])
  t.same([...directives(undefined)], [])
  t.same([...directives('a= x , b="q"r", c=d"e", =f, g')], [['a', 'x'], ['b', 'q"r'], ['c', 'd"e"'], ['g', true]], 'quotes stripped only when they enclose the value')
  t.same([...directives('h="i"j')], [['h', '"i"j']])
  t.ok(asksForFresh({ 'cache-control': 'no-cache' }))
  t.ok(asksForFresh({ 'cache-control': 'max-age=0' }))
  t.notOk(asksForFresh({ 'cache-control': 'max-age=10' }))
  t.notOk(asksForFresh({ pragma: 'no-cache' }), 'Pragma is not read')
  t.ok(requestCacheable('GET', {}))
  t.ok(requestCacheable('HEAD', {}))
  t.notOk(requestCacheable('POST', {}))
  t.notOk(requestCacheable('GET', { cookie: 'a=b' }))
  t.notOk(requestCacheable('GET', { 'cache-control': 'no-store' }))
  t.ok(varyMatches([['x', '']], {}))
  t.equal(cacheStatus({ hit: true, fwd: 'stale', fwdStatus: 503, stored: false, ttlSeconds: -5, detail: 'stale-error' }),
    'store-auth-proxy; hit; fwd=stale; fwd-status=503; ttl=-5; detail=stale-error')
  t.equal(cacheStatus({ fwd: 'miss', stored: true }), 'store-auth-proxy; fwd=miss; stored')
  t.equal(cacheStatus({}), 'store-auth-proxy')
  t.equal(withUpstream('ours', undefined), 'ours')
  t.equal(withUpstream('ours', 'CDN; hit'), 'ours, CDN; hit')
  t.equal(withUpstream('ours', ['A; hit', 'B; fwd=miss']), 'ours, A; hit, B; fwd=miss')
})

t.test('an entry\'s standing: fresh, then stale within stale=, then gone; through Redis its age is the key\'s TTL', async (t) => {
  const e = entry()
  t.same(standing(e, 100), { ageMs: 2000, ttlMs: 1000, fresh: true, usable: true })
  t.same(standing(e, 1099), { ageMs: 2999, ttlMs: 1, fresh: true, usable: true })
  t.same(standing(e, 1100), { ageMs: 3000, ttlMs: 0, fresh: false, usable: true })
  t.same(standing(e, 1599), { ageMs: 3499, ttlMs: -499, fresh: false, usable: true })
  t.same(standing(e, 1600), { ageMs: 3500, ttlMs: -500, fresh: false, usable: false })
  t.same(standing(e, 50), { ageMs: 2000, ttlMs: 1000, fresh: true, usable: true }, 'never younger than stored')
  const back = decodeEntry(encodeEntry(e, 5_000), 5_300, 10_000)
  t.same(back, { ...e, storedAt: 10_000 - 300 }, 'stored 300 ms ago by Redis\'s clock')
  t.equal(decodeEntry(Buffer.from('nonsense'), 1, 0), 'not an entry')
  const { body: _b, storedAt: _s, ...description } = e
  for (const field of ['status', 'freshMs', 'staleMs', 'vary'] as const) {
    const json = Buffer.from(JSON.stringify({ v: 2, ...description, storedAtMs: 0, bytes: 0, [field]: 'x' }))
    const head = Buffer.alloc(4)
    head.writeUInt32BE(json.length)
    t.equal(decodeEntry(Buffer.concat([head, json]), 1, 0), `its ${field} is wrong`, `an entry whose ${field} is wrong is none`)
  }
  const headers = FIELD_BYTES + 'content-type'.length + 'application/json'.length + FIELD_BYTES + 'x-multi'.length + 2 * (FIELD_BYTES + 1)
  t.equal(entrySize(e), ENTRY_BYTES + 7 + 2 + headers + FIELD_BYTES + 'x-tenant'.length + 1, 'body, overhead, path, headers and Vary, all counted')
  t.equal(decodeEntry(Buffer.alloc(2), 1, 0), 'not an entry')
  const alien = Buffer.concat([Buffer.from([0, 0, 0, 2]), Buffer.from('{}')])
  t.equal(decodeEntry(alien, 1, 0), 'another version', 'JSON that is not an entry')
})

t.test('the memory store: bounded by bytes, least recently used evicted, entries past stale= dropped', async (t) => {
  const c = fakeClock()
  const evicted: string[] = []
  const one = entry({ storedAt: c.clock.now(), body: Buffer.alloc(1000), display: 'x' })
  const size = entrySize(one)
  t.equal(size, entrySize({ ...one, body: Buffer.alloc(0) }) + 1000)
  const store = createMemoryStore({ clock: c.clock, maxBytes: 3 * size, onEvict: (e) => { evicted.push(e.display) } })
  t.ok(store.set('a', { ...one, display: 'a' }))
  t.ok(store.set('b', { ...one, display: 'b' }))
  t.ok(store.set('c', { ...one, display: 'c' }))
  t.equal(store.bytes(), 3 * size)
  store.get('a')
  t.ok(store.set('d', { ...one, display: 'd' }))
  t.same(evicted, ['b'], 'the least recently used went')
  t.same(store.entries().map((e) => e.display).sort(), ['a', 'c', 'd'])
  t.notOk(store.set('huge', { ...one, body: Buffer.alloc(4 * size) }), 'larger than the whole store: refused')
  const exact = createMemoryStore({ clock: c.clock, maxBytes: size, onEvict: () => {} })
  t.ok(exact.set('x', one), 'exactly the whole store: kept')
  t.same(evicted, ['b'])
  await c.tick(1499)
  t.equal(store.get('a')?.display, 'a', 'stale, still usable')
  await c.tick(1)
  t.equal(store.get('a'), undefined, 'past stale=: gone')
  t.equal(store.bytes(), 2 * size)
  t.same(evicted, ['b'], 'an entry that lapsed is not an eviction')
})

t.test('decide: repeated fields (lists from the parser) are read joined, as HTTP joins them', async (t) => {
  t.same(decide(option, '/p', { accept: ['a', 'b'] }, 200, { 'cache-control': ['public', 'max-age=60'], vary: ['Accept', 'X-T'] }),
    { store: true, freshMs: 60_000, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [['x-t', '']] })
  const listed = decide(option, '/p', { 'x-t': ['a', 'b'] }, 200, { vary: 'X-T' })
  t.ok(listed.store && varyMatches(listed.vary, { 'x-t': 'a, b' }), 'a repeated field matches its joined form')
  t.same(decide(option, '/p', {}, 200, { 'cache-control': ['v', 'no-store'] }), { store: false, why: 'no-store' })
})
