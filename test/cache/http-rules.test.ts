// HTTP's own rules for a shared cache where RFC 9111 says MUST (where the features meet, case 9), the
// invalidation a write causes (case 8), and what an entry in Redis must be to be one (case 7):
// the pure parts, table-driven.
import t from 'tap'
import { ageSeconds, cacheKey, decide, directives, freshnessLifetimeMs, httpDate, invalidatedUris, uriKey } from '../../src/cache/policy.js'
import { createMemoryStore, decodeEntry, encodeEntry, entrySize, ENTRY_VERSION, type Entry } from '../../src/cache/entries.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { entry } from './entry.js'

const HOUR = 3_600_000
const NOW = Date.UTC(2026, 11, 1, 21, 0, 0)
const option = { freshMs: HOUR, staleMs: 2 * HOUR }
const stored = (headers: Record<string, string | string[]>) => decide(option, '/p', {}, 200, headers, NOW)

t.test('HTTP-date: IMF-fixdate and the two obsolete forms, exactly; anything else is not a date (RFC 9110 §5.6.7)', async (t) => {
  const valid: Array<[string, number]> = [
    ['Sun, 06 Nov 1994 08:49:37 GMT', Date.UTC(1994, 10, 6, 8, 49, 37)],
    ['Sunday, 06-Nov-94 08:49:37 GMT', Date.UTC(1994, 10, 6, 8, 49, 37)],
    ['Sun Nov  6 08:49:37 1994', Date.UTC(1994, 10, 6, 8, 49, 37)],
    ['Sun Nov 16 08:49:37 1994', Date.UTC(1994, 10, 16, 8, 49, 37)],
    ['Thu, 01 Jan 1970 00:00:00 GMT', 0],
    ['Wed, 31 Dec 2025 23:59:59 GMT', Date.UTC(2025, 11, 31, 23, 59, 59)],
    ['Tue, 01 Dec 2026 21:00:00 GMT', NOW],
    ['Mon, 29 Feb 2016 12:00:00 GMT', Date.UTC(2016, 1, 29, 12)],
    ['Sat, 31 Dec 2016 23:59:60 GMT', Date.UTC(2017, 0, 1)],
    ['Mon, 01 Jan 0001 00:00:00 GMT', Date.UTC(2001, 0, 1) - 2000 * 365.2425 * 86_400_000],
    ['Tuesday, 01-Dec-26 21:00:00 GMT', NOW],
    ['Friday, 01-Jan-76 00:00:00 GMT', Date.UTC(2076, 0, 1)],
    ['Friday, 01-Jan-77 00:00:00 GMT', Date.UTC(1977, 0, 1)],
    ['Monday, 01-Jan-00 00:00:00 GMT', Date.UTC(2000, 0, 1)],
    ...['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'].map((month, i) =>
      [`Mon, 01 ${month} 2024 00:00:00 GMT`, Date.UTC(2024, i, 1)] as [string, number]),
    ...['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'].map((day) => [`${day}, 01 Jan 2024 00:00:00 GMT`, Date.UTC(2024, 0, 1)] as [string, number]),
    ...['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'].map((day) =>
      [`${day}, 01-Jan-24 00:00:00 GMT`, Date.UTC(2024, 0, 1)] as [string, number])
  ]
  for (const [text, ms] of valid) {
    // Stryker's year-0001 case: setUTCFullYear keeps years below 100 as written (Date.UTC would add 1900).
    if (text.includes('0001')) t.equal(new Date(httpDate(text, NOW)!).getUTCFullYear(), 1, text)
    else t.equal(httpDate(text, NOW), ms, text)
  }
  const invalid = [
    'Thu, 01 Jan 1970 00:00:00 UTC', 'Thu 01 Jan 1970 00:00:00 GMT', 'Thu, 01-Jan-1970 00:00:00 GMT',
    'Thu, 01 Jan 1970 0:00:00 GMT', 'Thu, 1 Jan 1970 00:00:00 GMT', 'thu, 01 Jan 1970 00:00:00 GMT',
    'Thu, 01 jan 1970 00:00:00 GMT', 'Thu, 01 Jan 1970 00:00:00 gmt', 'Thu, 01 Jan 70 00:00:00 GMT',
    'Thu,  01 Jan 1970 00:00:00 GMT', ' Thu, 01 Jan 1970 00:00:00 GMT', 'Thu, 01 Jan 1970 00:00:00 GMT ',
    'Thursday, 01 Jan 1970 00:00:00 GMT', 'Thu, 01-Jan-70 00:00:00 GMT', 'Thursday, 01-Jan-1970 00:00:00 GMT',
    'Thursday, 01-Jan-70 00:00:00 UTC', 'Thu Jan  1 00:00:00 1970 GMT', 'Thu Jan 1 00:00:00 1970', 'Thu Jan 01 00:00 1970',
    'Thu, 01 Jan 1970 24:00:00 GMT', 'Thu, 01 Jan 1970 23:60:00 GMT', 'Thu, 01 Jan 1970 23:59:61 GMT',
    'Thu, 31 Feb 2026 00:00:00 GMT', 'Thu, 00 Jan 2026 00:00:00 GMT', 'Thu, 32 Jan 2026 00:00:00 GMT',
    'Thu, 01 Jan 1970 00:00:00 +0000', '0', '-1', '', '1970-01-01T00:00:00Z', 'Thu, 01 Jan 1970 00:00:00', 'Thu, 01 Foo 1970 00:00:00 GMT'
  ]
  for (const text of invalid) t.equal(httpDate(text, NOW), undefined, JSON.stringify(text))
  t.equal(httpDate('Thu Jan 01 00:00:00 1970', NOW), 0, 'asctime with a two-digit day')
  t.equal(httpDate('Thu, 29 Feb 2026 00:00:00 GMT', NOW), undefined, 'no 29 February in 2026')
  t.equal(httpDate('Friday, 01-Jan-76 00:00:00 GMT', Date.UTC(2025, 0, 1)), Date.UTC(1976, 0, 1), '51 years ahead: a past year')
  t.equal(httpDate('Friday, 01-Jan-75 00:00:00 GMT', Date.UTC(2025, 0, 1)), Date.UTC(2075, 0, 1), '50 years ahead: as written')
})

t.test('Age: its first member when it is a list; none when it is not a delta-seconds (RFC 9111 §5.1)', async (t) => {
  const table: Array<[string | string[] | undefined, number]> = [
    [undefined, 0], ['0', 0], ['50', 50], ['7200, 0', 7200], [['7200', '0'], 7200], ['7200,0', 7200], [' 12 ', 12],
    ['-5', 0], ['1.5', 0], ['abc', 0], ['', 0], ['5s', 0], ['0x10', 0], ['1e3', 0], ['99999999999', 2_147_483_648], [', 7', 0]
  ]
  for (const [value, seconds] of table) t.equal(ageSeconds(value), seconds, JSON.stringify(value))
  t.same(stored({ 'cache-control': 'max-age=10000', age: '7200, 0' }), { store: true, freshMs: 2800_000, staleMs: 2 * HOUR, initialAgeMs: 7200_000, vary: [] },
    'an answer two hours old is two hours old')
  t.same(stored({ 'cache-control': 'max-age=60', age: 'soon' }), { store: true, freshMs: 60_000, staleMs: 2 * HOUR, initialAgeMs: 0, vary: [] }, 'an invalid Age is ignored')
})

t.test('freshness lifetime: s-maxage, then max-age, then Expires less Date; an invalid one is already expired', async (t) => {
  const life = (headers: Record<string, string | string[]>) => freshnessLifetimeMs(directives(headers['cache-control']), headers, NOW)
  const date = 'Tue, 01 Dec 2026 20:00:00 GMT'
  const table: Array<[Record<string, string | string[]>, number | undefined, string]> = [
    [{}, undefined, 'none stated'],
    [{ 'cache-control': 'public' }, undefined, 'none stated'],
    [{ 'cache-control': 'max-age=60' }, 60_000, 'max-age'],
    [{ 'cache-control': 's-maxage=30, max-age=60' }, 30_000, 's-maxage first'],
    [{ 'cache-control': 'max-age=60, s-maxage=30' }, 30_000, 's-maxage wherever it is'],
    [{ 'cache-control': 'max-age=60, max-age=10' }, 60_000, 'a repeated directive: its first'],
    [{ 'cache-control': 'max-age=abc' }, 0, 'an invalid max-age'],
    [{ 'cache-control': 'max-age' }, 0, 'a max-age without a value'],
    [{ 'cache-control': 'max-age=-1' }, 0, 'a negative max-age'],
    [{ 'cache-control': 's-maxage=x, max-age=60' }, 0, 'an invalid s-maxage'],
    [{ 'cache-control': 'max-age="90"' }, 90_000, 'a quoted one'],
    [{ 'cache-control': 'max-age=60', expires: 'Thu, 01 Jan 1970 00:00:00 GMT' }, 60_000, 'max-age wins over Expires'],
    [{ expires: 'Tue, 01 Dec 2026 21:01:00 GMT' }, 60_000, 'Expires less now when there is no Date'],
    [{ expires: 'Tue, 01 Dec 2026 20:01:00 GMT', date }, 60_000, 'Expires less Date'],
    [{ expires: 'Tue, 01 Dec 2026 20:01:00 GMT', date: 'yesterday' }, 0, 'an invalid Date: now instead'],
    [{ expires: 'Tue, 01 Dec 2026 19:00:00 GMT', date }, 0, 'an Expires before Date'],
    [{ expires: 'Thu, 01 Jan 1970 00:00:00 UTC' }, 0, 'UTC for GMT'],
    [{ expires: 'Tue 01 Dec 2026 22:00:00 GMT' }, 0, 'a missing comma'],
    [{ expires: 'Tue, 01-Dec-2026 22:00:00 GMT' }, 0, 'dashes'],
    [{ expires: 'Tue, 01 Dec 2026 9:00:00 GMT' }, 0, 'a one-digit hour'],
    [{ expires: '0' }, 0, '"0"'],
    [{ expires: ['Tue, 01 Dec 2026 22:00:00 GMT', 'Tue, 01 Dec 2026 23:00:00 GMT'] }, 0, 'two Expires'],
    [{ expires: ['Tue, 01 Dec 2026 22:00:00 GMT'] }, HOUR, 'one Expires, as a list'],
    [{ expires: 'Tuesday, 01-Dec-26 22:00:00 GMT' }, HOUR, 'the RFC 850 form'],
    [{ expires: 'Tue Dec  1 22:00:00 2026' }, HOUR, 'the asctime form']
  ]
  for (const [headers, ms, why] of table) t.equal(life(headers), ms, why)
})

t.test('decide: what may be stored and for how long, and when it may stand in stale', async (t) => {
  const table: Array<[Record<string, string>, { freshMs: number, staleMs: number } | 'expired', string]> = [
    [{ 'cache-control': 'max-age=600, proxy-revalidate' }, { freshMs: 600_000, staleMs: 0 }, 'proxy-revalidate with a max-age: stored, never stale'],
    [{ 'cache-control': 'max-age=600, must-revalidate' }, { freshMs: 600_000, staleMs: 0 }, 'must-revalidate: never stale'],
    [{ 'cache-control': 's-maxage=600' }, { freshMs: 600_000, staleMs: 0 }, 's-maxage: never stale (§5.2.2.10)'],
    [{ 'cache-control': 's-maxage=0, max-age=600' }, 'expired', 's-maxage=0: nothing to keep'],
    [{ 'cache-control': 'max-age=600' }, { freshMs: 600_000, staleMs: 2 * HOUR }, 'max-age alone: stale= applies'],
    [{ 'cache-control': 'max-age=600, public' }, { freshMs: 600_000, staleMs: 2 * HOUR }, 'public'],
    [{ expires: 'Thu, 01 Jan 1970 00:00:00 UTC' }, { freshMs: 0, staleMs: 2 * HOUR }, 'an invalid Expires: stale at once, not kept for cache='],
    [{ expires: 'Tue, 01 Dec 2026 21:10:00 GMT' }, { freshMs: 600_000, staleMs: 2 * HOUR }, 'a valid Expires'],
    [{ expires: 'Wed, 02 Dec 2026 21:00:00 GMT' }, { freshMs: HOUR, staleMs: 2 * HOUR }, 'cache= is the most'],
    [{ 'cache-control': 'max-age=600', age: '700' }, { freshMs: 0, staleMs: 2 * HOUR }, 'older than its lifetime on arrival']
  ]
  for (const [headers, want, why] of table) {
    t.same(stored(headers), want === 'expired' ? { store: false, why: 'expired' } : { store: true, ...want, initialAgeMs: headers.age === undefined ? 0 : 700_000, vary: [] }, why)
  }
  t.same(decide({ freshMs: HOUR, staleMs: 0 }, '/p', {}, 200, { expires: 'Tue, 01 Dec 2026 21:00:00 UTC' }, NOW), { store: false, why: 'expired' },
    'an invalid Expires without stale=: not stored')
  t.equal(stored({ expires: 'Tue, 01 Dec 2026 22:00:00 GMT' }).store, true)
  const wall = decide(option, '/p', {}, 200, { expires: new Date(Date.now() + 60_000).toUTCString() })
  t.ok(wall.store && wall.freshMs > 55_000 && wall.freshMs <= 60_000, 'without a time given: the wall clock')
})

t.test('invalidation: an unsafe method\'s success drops its target, and its Location and Content-Location on the same origin', async (t) => {
  const U = 'https://store.example'
  const uris = (method: string, status: number, headers: Record<string, string | string[]> = {}, path = '/v2/store/a?x=1') =>
    invalidatedUris(U, method, path, status, headers)
  t.same(uris('PUT', 200), [uriKey(U, '/v2/store/a?x=1')])
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE', 'PURGE', 'LOCK']) t.same(uris(method, 204), [uriKey(U, '/v2/store/a?x=1')], method)
  for (const method of ['GET', 'HEAD', 'OPTIONS', 'TRACE']) t.same(uris(method, 200), [], `${method} is safe`)
  for (const status of [200, 201, 299, 300, 302, 399]) t.equal(uris('POST', status).length, 1, `${status}`)
  for (const status of [100, 199, 400, 404, 409, 500, 503]) t.same(uris('POST', status), [], `${status} is an error (or not final)`)
  t.same(uris('POST', 201, { location: '/v2/store/a/7' }), [uriKey(U, '/v2/store/a?x=1'), uriKey(U, '/v2/store/a/7')], 'Location, absolute path')
  t.same(uris('POST', 201, { location: 'b' }), [uriKey(U, '/v2/store/a?x=1'), uriKey(U, '/v2/store/b')], 'Location, relative to the target')
  t.same(uris('POST', 201, { location: 'https://store.example/v2/store/c?y=2' }), [uriKey(U, '/v2/store/a?x=1'), uriKey(U, '/v2/store/c?y=2')])
  t.same(uris('POST', 201, { 'content-location': '/v2/store/d' }), [uriKey(U, '/v2/store/a?x=1'), uriKey(U, '/v2/store/d')], 'Content-Location')
  t.same(uris('POST', 201, { location: '/v2/store/e', 'content-location': '/v2/store/f' }),
    [uriKey(U, '/v2/store/a?x=1'), uriKey(U, '/v2/store/e'), uriKey(U, '/v2/store/f')], 'both')
  t.same(uris('POST', 201, { location: '/v2/store/a?x=1' }), [uriKey(U, '/v2/store/a?x=1')], 'the target itself: once')
  for (const other of ['https://other.example/v2/store/a', 'http://store.example/v2/store/a', 'https://store.example:8443/v2/store/a', '//evil.example/x']) {
    t.same(uris('POST', 201, { location: other }), [uriKey(U, '/v2/store/a?x=1')], `another origin: ${other}`)
  }
  t.same(uris('POST', 201, { location: 'http://[bad' }), [uriKey(U, '/v2/store/a?x=1')], 'a Location that is no URL')
  t.same(uris('POST', 201, { location: ['/v2/store/g', '/v2/store/h'] }), [uriKey(U, '/v2/store/a?x=1')], 'a repeated Location: neither')
  t.equal(cacheKey(U, '/v2/store/a?x=1', { accept: 'text/csv' }).uri, uriKey(U, '/v2/store/a?x=1'), 'every variant carries its target\'s digest')
  t.not(uriKey(U, '/v2/store/a'), uriKey('https://sandbox.example', '/v2/store/a'), 'another upstream: another target')
  t.equal(uriKey(U, '/a').length, 32)
})

/** An encoded entry whose description is `description`, with `body` after it. */
function raw (description: unknown, body = Buffer.from('{"a":1}')): Buffer {
  const json = Buffer.from(JSON.stringify(description))
  const head = Buffer.alloc(4)
  head.writeUInt32BE(json.length)
  return Buffer.concat([head, json, body])
}

t.test('an entry in Redis: its version, every field and its body checked; its age from when Redis stored it', async (t) => {
  const e = entry()
  const encoded = encodeEntry(e, 1_000_000)
  const { body: _b, storedAt: _s, ...rest } = e
  const description = JSON.parse(encoded.subarray(4, 4 + encoded.readUInt32BE(0)).toString()) as Record<string, unknown>
  t.same(description, { v: ENTRY_VERSION, ...rest, storedAtMs: 1_000_000, bytes: 7 })
  t.equal(ENTRY_VERSION, 2)
  t.same(decodeEntry(encoded, 1_000_250, 50_000), { ...e, storedAt: 50_000 - 250 }, 'stored 250 ms ago on Redis\'s clock')
  t.same(decodeEntry(encoded, 999_000, 50_000), { ...e, storedAt: 50_000 }, 'a Redis clock that went back: never younger than stored')
  const good = { ...description }
  const wrong: Array<[string, unknown, string]> = [
    ['v', 1, 'another version'], ['v', undefined, 'another version'], ['v', '2', 'another version'],
    ['status', 99, 'its status is wrong'], ['status', 600, 'its status is wrong'], ['status', 200.5, 'its status is wrong'], ['status', '200', 'its status is wrong'],
    ['headers', null, 'its headers is wrong'], ['headers', ['a'], 'its headers is wrong'], ['headers', 'a: b', 'its headers is wrong'],
    ['headers', { a: 1 }, 'its headers is wrong'], ['headers', { a: ['b', 2] }, 'its headers is wrong'], ['headers', undefined, 'its headers is wrong'],
    ['freshMs', -1, 'its freshMs is wrong'], ['freshMs', 'x', 'its freshMs is wrong'], ['freshMs', null, 'its freshMs is wrong'],
    ['staleMs', undefined, 'its staleMs is wrong'], ['initialAgeMs', -5, 'its initialAgeMs is wrong'], ['storedAtMs', undefined, 'its storedAtMs is wrong'],
    ['vary', {}, 'its vary is wrong'], ['vary', [['a']], 'its vary is wrong'], ['vary', [['a', 'b', 'c']], 'its vary is wrong'],
    ['vary', [['a', 1]], 'its vary is wrong'], ['vary', ['ab'], 'its vary is wrong'],
    ['rule', 5, 'its rule is wrong'], ['display', undefined, 'its display is wrong'], ['uri', undefined, 'its uri is wrong'],
    ['bytes', '7', 'its bytes is wrong'], ['bytes', 6, 'its body is cut'], ['bytes', 8, 'its body is cut']
  ]
  for (const [field, value, why] of wrong) t.equal(decodeEntry(raw({ ...good, [field]: value }), 0, 0), why, `${field}: ${JSON.stringify(value)}`)
  t.same(decodeEntry(raw({ ...good, status: 100, headers: {}, vary: [], freshMs: 0, staleMs: 0, initialAgeMs: 0 }), 1_000_000, 0),
    { ...e, status: 100, headers: {}, vary: [], freshMs: 0, staleMs: 0, initialAgeMs: 0, storedAt: 0 }, 'the least of each is still an entry')
  t.equal((decodeEntry(raw({ ...good, status: 599 }), 1_000_000, 0) as Entry).status, 599)
  for (const value of [null, 5, 'text', [1, 2]]) t.equal(decodeEntry(raw(value), 0, 0), typeof value === 'object' && value !== null ? 'another version' : 'not an entry', JSON.stringify(value))
  t.equal(decodeEntry(Buffer.from([0, 0, 0, 9, 123]), 0, 0), 'not an entry', 'a description cut short')
  t.equal(decodeEntry(Buffer.alloc(0), 0, 0), 'not an entry')
  // The layout before versions (the features-meet case 7: a rolling update).
  t.equal(decodeEntry(raw(rest), 0, 0), 'another version')
})

t.test('the memory store drops every copy of a target URI, whatever its keyed headers, and only those', async (t) => {
  const c = fakeClock()
  const store = createMemoryStore({ clock: c.clock, maxBytes: 100_000, onEvict: () => {} })
  store.set('a-json', entry({ uri: 'A', storedAt: c.clock.now() }))
  store.set('a-csv', entry({ uri: 'A', storedAt: c.clock.now() }))
  store.set('b', entry({ uri: 'B', storedAt: c.clock.now() }))
  t.equal(store.drop('A'), 2)
  t.equal(store.get('a-json'), undefined)
  t.equal(store.get('a-csv'), undefined)
  t.ok(store.get('b'))
  t.equal(store.drop('A'), 0, 'nothing left to drop')
  t.equal(store.drop('none'), 0)
  // A copy replaced by one of another target leaves the first target's list.
  store.set('b', entry({ uri: 'C', storedAt: c.clock.now() }))
  t.equal(store.drop('B'), 0)
  t.equal(store.drop('C'), 1)
  // One variant of a target replaced by another target's: the other variant is still listed.
  store.set('v1', entry({ uri: 'V', storedAt: c.clock.now() }))
  store.set('v2', entry({ uri: 'V', storedAt: c.clock.now() }))
  store.set('v1', entry({ uri: 'W', storedAt: c.clock.now() }))
  t.equal(store.drop('V'), 1, 'v2 still dropped with its target')
  t.equal(store.drop('W'), 1)
  // One evicted or lapsed leaves it too.
  const small = createMemoryStore({ clock: c.clock, maxBytes: entrySize(entry({ uri: 'X' })) + 100, onEvict: () => {} })
  small.set('x', entry({ uri: 'X', storedAt: c.clock.now() }))
  small.set('y', entry({ uri: 'Y', storedAt: c.clock.now() }))
  t.equal(small.entries().length, 1, 'x was evicted')
  t.equal(small.drop('X'), 0)
  await c.tick(1500)
  t.equal(small.get('y'), undefined, 'lapsed')
  t.equal(small.drop('Y'), 0)
  t.equal(small.bytes(), 0)
})
