// What the read cache stores, for whom, and what a caller sees in each case: keys that never
// mix answers, TI's Cache-Control obeyed, one fetch for concurrent misses, a stored answer
// standing in for TI's failure, and nothing stored from an answer that did not arrive whole.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { CATALOG, HOUR, cacheSidecar, catalogBody, startTi, type Ti } from './fixture.js'

const env = (limits: string, more: Record<string, string> = {}): Record<string, string> =>
  ({ RATE_LIMITS: `GET /v2/store/** ${limits}`, RATE_LIMIT_MAX_WAIT_MS: '0', ...more })
const json = (body: string, headers: Record<string, string> = {}) => () => ({ status: 200, headers: { 'content-type': 'application/json', ...headers }, body })

t.test('keys: path, query and the Accept headers each make their own entry; other headers never mix them', async (t) => {
  const ti = await startTi(t)
  ti.answer((req) => ({ status: 200, body: `${req.url} ${req.headers.accept ?? ''} ${req.headers['accept-language'] ?? ''} ${req.headers['accept-encoding'] ?? ''}` }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const asks: Array<[string, Record<string, string>]> = [
    ['/v2/store/a', {}], ['/v2/store/b', {}], ['/v2/store/a?page=2', {}], ['/v2/store/a', { accept: 'text/csv' }],
    ['/v2/store/a', { 'accept-language': 'de' }], ['/v2/store/a', { 'accept-encoding': 'gzip' }]
  ]
  for (const [path, headers] of asks) {
    const first = await s.get(path, headers)
    t.match(first.headers['cache-status'], /fwd=miss/, `${path} ${JSON.stringify(headers)} is its own entry`)
    const again = await s.get(path, { ...headers, 'x-caller': 'other' })
    t.equal(again.body, first.body)
    t.match(again.headers['cache-status'], /; hit/)
  }
  t.equal(ti.received.length, asks.length)
})

t.test('TI\'s Vary beyond the Accept headers: a different value is a miss, never the other caller\'s answer', async (t) => {
  const ti = await startTi(t)
  ti.answer((req) => ({ status: 200, headers: { vary: 'X-Tenant' }, body: `for ${String(req.headers['x-tenant'])}` }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  t.equal((await s.get('/v2/store/a', { 'x-tenant': 'one' })).body, 'for one')
  t.equal((await s.get('/v2/store/a', { 'x-tenant': 'two' })).body, 'for two')
  t.equal((await s.get('/v2/store/a', { 'x-tenant': 'two' })).headers['cache-status'], 'store-auth-proxy; hit; ttl=3600')
  t.equal(ti.received.length, 2)
})

t.test('TI forbids storing (no-store, private, no-cache, Set-Cookie, Vary: *) or says less than cache=', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  for (const [headers, why] of [
    [{ 'cache-control': 'no-store' }, 'no-store'], [{ 'cache-control': 'private, max-age=60' }, 'private'],
    [{ 'cache-control': 'no-cache' }, 'no-cache'], [{ 'set-cookie': 'a=b' }, 'set-cookie'], [{ vary: '*' }, 'vary']
  ] as const) {
    ti.answer(json('{}', headers))
    const path = `/v2/store/${why}`
    t.equal((await s.get(path)).headers['cache-status'], `store-auth-proxy; fwd=miss; fwd-status=200; detail=${why}`)
    await s.get(path)
    t.equal(ti.received.filter((r) => r.url === path).length, 2, `${why}: never stored`)
  }
  // max-age=60 bounds cache=1h; Age counts toward it.
  ti.answer(json('{}', { 'cache-control': 'max-age=60', age: '20' }))
  const short = await s.get('/v2/store/short')
  t.equal(short.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=40')
  t.equal(short.headers.age, '20')
  await s.advance(39_000)
  t.match((await s.get('/v2/store/short')).headers['cache-status'], '; hit; ttl=1')
  await s.advance(2_000)
  t.match((await s.get('/v2/store/short')).headers['cache-status'], 'fwd=miss', 'gone at its end: no stale= to keep it')
  // Not a 200: passed on, not stored.
  ti.answer(() => ({ status: 404, body: 'no such part' }))
  t.equal((await s.get('/v2/store/none')).headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=404')
  await s.get('/v2/store/none')
  t.equal(ti.received.filter((r) => r.url === '/v2/store/none').length, 2)
  const m = await s.metrics()
  t.equal(m.get(seriesKey('store_auth_proxy_cache_not_stored_total', { rule: 'GET /v2/store/**', reason: 'private' })), 2)
})

t.test('a caller\'s no-cache asks TI again within the budget; with the budget spent it gets the stored answer', async (t) => {
  const ti = await startTi(t)
  let n = 0
  ti.answer(() => ({ status: 200, body: `v${++n}` }))
  const s = await cacheSidecar(t, ti, env('2/1h cache=1h'))
  t.equal((await s.get('/v2/store/a')).body, 'v1')
  const again = await s.get('/v2/store/a', { 'cache-control': 'no-cache' })
  t.equal(again.body, 'v2')
  t.equal(again.headers['cache-status'], 'store-auth-proxy; fwd=request; fwd-status=200; stored; ttl=3600')
  const refused = await s.get('/v2/store/a', { 'cache-control': 'no-cache' })
  t.equal(refused.status, 200)
  t.equal(refused.body, 'v2')
  t.equal(refused.headers['cache-status'], 'store-auth-proxy; hit; ttl=3600; detail=no-refresh-budget')
  t.equal(ti.received.length, 2)
})

t.test('200 concurrent misses make one call to TI; a caller that leaves does not cancel it for the others', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('1/1h cache=1h'))
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + CATALOG.replace('/v2/store/products', '/v2/store'), { signal: leaver.signal }).catch(() => 'left')
  await eventuallyWaiting(t, ti, 1)
  const callers = Array.from({ length: 200 }, async () => await s.get(CATALOG.replace('/v2/store/products', '/v2/store')))
  await eventuallyInFlight(t, s, 201)
  leaver.abort()
  t.equal(await left, 'left')
  ti.release()
  const answers = await Promise.all(callers)
  t.same(new Set(answers.map((a) => a.status)), new Set([200]), 'every caller got the catalog')
  t.ok(answers.every((a) => a.body === catalogBody()))
  t.equal(answers.filter((a) => /detail=coalesced/.test(String(a.headers['cache-status']))).length, 200)
  t.equal(ti.received.length, 1, 'TI saw one call')
})

async function eventuallyWaiting (t: Test, ti: Ti, n: number): Promise<void> {
  await eventually(t, `${n} request(s) held at TI`, () => ti.waiting() >= n)
}

async function eventuallyInFlight (t: Test, s: Awaited<ReturnType<typeof cacheSidecar>>, n: number): Promise<void> {
  await eventually(t, `${n} requests in flight at the sidecar`, async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) >= n)
}

t.test('an answer over CACHE_ENTRY_MAX_BYTES streams through, uncached, and says so', async (t) => {
  const ti = await startTi(t)
  ti.answer(json(catalogBody(5_000)))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h', { CACHE_ENTRY_MAX_BYTES: '2048' }))
  const big = await s.get('/v2/store/big')
  t.equal(big.body, catalogBody(5_000))
  t.equal(big.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=too-large')
  await s.get('/v2/store/big')
  t.equal(ti.received.length, 2)
})

t.test('TI cut mid-body: nothing stored, the caller gets 502 (or the stale answer when there is one)', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1m stale=1h'))
  ti.answer(() => ({ status: 200, body: catalogBody(), cutAfter: 100 }))
  const cut = await s.get('/v2/store/a')
  t.equal(cut.status, 502)
  ti.answer(json('whole'))
  t.equal((await s.get('/v2/store/a')).body, 'whole', 'nothing of the cut answer was stored')
  await s.advance(2 * 60_000)
  ti.answer(() => ({ status: 200, body: catalogBody(), cutAfter: 100 }))
  const stale = await s.get('/v2/store/a')
  t.equal(stale.status, 200)
  t.equal(stale.body, 'whole')
  t.equal(stale.headers['cache-status'], 'store-auth-proxy; hit; fwd=stale; ttl=-60; detail=stale-error')
})

t.test('TI fails a refresh (5xx, 429): the stale answer stands in (stale-if-error); a 429 still cools the rule down', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1m stale=1h'))
  ti.answer(json('good'))
  await s.get('/v2/store/a')
  await s.advance(2 * 60_000)
  ti.answer(() => ({ status: 503, body: 'down' }))
  const e = await s.get('/v2/store/a')
  t.equal(e.body, 'good')
  t.equal(e.headers['cache-status'], 'store-auth-proxy; hit; fwd=stale; fwd-status=503; ttl=-60; detail=stale-error')
  ti.answer(() => ({ status: 429, headers: { 'retry-after': '600' }, body: 'slow down' }))
  t.equal((await s.get('/v2/store/a')).body, 'good')
  const cooling = await s.get('/v2/store/a')
  t.equal(cooling.body, 'good')
  t.equal(cooling.headers['cache-status'], 'store-auth-proxy; hit; ttl=-60; detail=stale-cooldown')
  t.equal(ti.received.length, 3, 'the cool-down kept the third refresh from TI')
  // Past stale=: the refusal as without a cache.
  await s.advance(HOUR)
  t.equal((await s.get('/v2/store/a')).status, 429)
})

t.test('HEAD: a miss is fetched as a GET and stored (no budget point spent for nothing); a hit has the headers only', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('1/1h cache=1h'))
  const head = await s.get('/v2/store/a', {}, 'HEAD')
  t.equal(head.status, 200)
  t.equal(head.body, '')
  t.equal(head.headers['content-length'], String(catalogBody().length))
  t.equal(head.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600')
  t.same(ti.received.map((r) => r.method), ['GET'], 'TI was asked for the whole answer')
  const get = await s.get('/v2/store/a')
  t.equal(get.body, catalogBody(), 'the GET that follows is served, though the 1/1h budget is spent')
  t.match(get.headers['cache-status'], '; hit')
  const again = await s.get('/v2/store/a', {}, 'HEAD')
  t.equal(again.body, '')
  t.equal(again.headers['content-length'], String(catalogBody().length))
  t.match(again.headers['cache-status'], '; hit')
  t.equal(ti.received.length, 1)
})

t.test('/status lists the entries without query values; a request with a Cookie bypasses the cache', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  await s.get('/v2/store/a?customer=jane&page=2')
  const status = await s.status()
  const cache = status.cache as { entries: Array<{ path: string, state: string, bytes: number }>, maxBytes: number }
  t.same(cache.entries.map((e) => [e.path, e.state]), [['/v2/store/a?customer=…&page=…', 'fresh']])
  t.notMatch(JSON.stringify(status), 'jane')
  t.equal(cache.maxBytes, 32 * 1024 * 1024)
  const cookie = await s.get('/v2/store/a?customer=jane&page=2', { cookie: 'session=1' })
  t.equal(cookie.headers['cache-status'], undefined)
  t.equal(ti.received.length, 2)
})

t.test('concurrent misses that TI\'s Vary tells apart never get each other\'s answer, though they waited for one fetch', async (t) => {
  const ti = await startTi(t)
  ti.answer((req) => ({ status: 200, headers: { vary: 'X-Tenant' }, body: `for ${String(req.headers['x-tenant'])}` }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  ti.hold()
  const one = s.get('/v2/store/a', { 'x-tenant': 'one' })
  await eventuallyWaiting(t, ti, 1)
  const two = s.get('/v2/store/a', { 'x-tenant': 'two' })
  await eventuallyInFlight(t, s, 2)
  // The second waits for the first's fetch; TI's Vary says that answer is not its own, so it asks TI itself.
  ti.release()
  t.equal((await one).body, 'for one')
  t.equal((await two).body, 'for two')
  t.equal(ti.received.length, 2)
})

t.test('a Cache-Status from TI\'s side is kept, after the sidecar\'s own', async (t) => {
  const ti = await startTi(t)
  ti.answer(json('{}', { 'cache-status': 'EdgeCDN; fwd=uri-miss' }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  t.equal((await s.get('/v2/store/a')).headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600, EdgeCDN; fwd=uri-miss')
  t.equal((await s.get('/v2/store/a')).headers['cache-status'], 'store-auth-proxy; hit; ttl=3600, EdgeCDN; fwd=uri-miss')
  ti.answer(json('{}', { 'cache-status': 'EdgeCDN; hit', 'cache-control': 'no-store' }))
  t.equal((await s.get('/v2/store/b')).headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=no-store, EdgeCDN; hit')
})

// Found by test/generative/cache.test.ts (seed 20261123): a repeated Cache-Control reached
// http-cache-semantics as a list, it threw, and the caller got a 502 for TI's 200.
t.test('counterexample: TI repeats Cache-Control (`v`, `v`): its 200 is passed on and stored', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { 'cache-control': ['v', 'v'] }, body: catalogBody(65_532) }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const first = await s.get('/v2/store/a')
  t.equal(first.status, 200)
  t.equal(first.body, catalogBody(65_532))
  t.equal(first.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=3600')
  t.match((await s.get('/v2/store/a')).headers['cache-status'], '; hit')
})

t.test('a fill whose caller left with nobody waiting is not replayed after a 401: nothing more is sent for nobody', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ti.received.length === 1 ? { status: 401, body: 'revoked' } : { status: 200, body: 'the catalog' })
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const generation = s.app.tokens.state().generation ?? 0
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/a', { signal: leaver.signal }).then(() => 'answered', () => 'left')
  await eventuallyWaiting(t, ti, 1)
  leaver.abort()
  t.equal(await left, 'left')
  await eventually(t, 'the caller gone at the sidecar', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 0)
  ti.release()
  // The 401 invalidates the token: a new one is fetched, and the fill ends without a replay.
  await eventually(t, 'a new token after the 401', () => (s.app.tokens.state().generation ?? 0) > generation)
  const next = await s.get('/v2/store/a')
  t.equal(next.body, 'the catalog')
  t.match(next.headers['cache-status'], /^store-auth-proxy; fwd=miss/, 'the next caller fetched it itself: no replay had stored it')
  t.equal(ti.received.length, 2, 'TI saw the 401 and the next caller\'s fetch, no replay for nobody')
})
