// Review of the read cache on one sidecar (fake clock, no Redis): honest headers, keys that
// never cross, what may be stored, and what /status shows. Regression tests failed on
// the code reviewed (each defect fixed since); PROBE tests passed on it.
import t from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request } from 'undici'
import { cacheSidecar, catalogBody, startTi, type Ti } from '../cache/fixture.js'

const env = (limits: string, more: Record<string, string> = {}): Record<string, string> =>
  ({ RATE_LIMITS: `GET /v2/store/** ${limits}`, RATE_LIMIT_MAX_WAIT_MS: '0', ...more })
const TI_DATE = 'Mon, 23 Nov 2026 10:00:00 GMT'

t.test('Regression: an answer within CACHE_ENTRY_MAX_BYTES but over CACHE_MAX_BYTES with its overhead is never labelled stored (it was, and nothing was kept)', async (t) => {
  const ti = await startTi(t)
  // The settings check allows CACHE_ENTRY_MAX_BYTES = CACHE_MAX_BYTES; an entry's size counts 256 bytes and its headers more.
  ti.answer(() => ({ status: 200, body: 'x'.repeat(65_400) }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h', { CACHE_MAX_BYTES: '65536', CACHE_ENTRY_MAX_BYTES: '65536' }))
  const first = await s.get('/v2/store/a')
  t.equal(first.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=too-large')
  t.equal(first.body.length, 65_400)
  const again = await s.get('/v2/store/a')
  t.match(again.headers['cache-status'], 'fwd=miss', 'nothing claimed stored, nothing served as a hit')
  t.equal(ti.received.length, 2)
})

t.test('Regression: /status shows a query field\'s value when it has no `=` (e.g. ?jane.doe@example.com)', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  await s.get('/v2/store/orders?jane.doe@example.com')
  const status = JSON.stringify(await s.status())
  t.match(status, '/v2/store/orders?', 'the entry is listed')
  t.notMatch(status, 'jane.doe', 'no query value in /status')
})

t.test('PROBE: Age, TI\'s Date, Content-Length and Cache-Status ttl on GET and HEAD hits; a chunked answer is served with its length', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { date: TI_DATE, age: '100', 'content-type': 'application/json' }, body: catalogBody() }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const first = await s.get('/v2/store/a')
  t.equal(first.headers.age, '100')
  t.equal(first.headers.date, TI_DATE)
  await s.advance(50_000)
  for (const method of ['GET', 'HEAD']) {
    const hit = await s.get('/v2/store/a', {}, method)
    t.equal(hit.headers.age, '150', `${method}: TI's Age plus the time held`)
    t.equal(hit.headers.date, TI_DATE, `${method}: TI's Date kept`)
    t.equal(hit.headers['content-length'], String(catalogBody().length), `${method}: the stored body's length`)
    t.equal(hit.headers['cache-status'], 'store-auth-proxy; hit; ttl=3550')
    t.equal(hit.body, method === 'HEAD' ? '' : catalogBody())
  }
  t.equal(ti.received.length, 1)

  // TI answers chunked (no Content-Length): the hit has a Content-Length and no Transfer-Encoding.
  const chunked = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('part one, ')
    res.end('part two')
  })
  await new Promise<void>((resolve) => chunked.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { chunked.closeAllConnections(); chunked.close() })
  const c = await cacheSidecar(t, { url: `http://127.0.0.1:${(chunked.address() as AddressInfo).port}` } as Ti, env('100/1h cache=1h'))
  t.match((await c.get('/v2/store/a')).headers['cache-status'], '; stored')
  const res = await request(c.proxyUrl + '/v2/store/a')
  t.equal(await res.body.text(), 'part one, part two')
  t.equal(res.headers['content-length'], '18')
  t.equal(res.headers['transfer-encoding'], undefined)
})

t.test('PROBE: percent-encoding and query spellings are keys of their own: answers never cross', async (t) => {
  const ti = await startTi(t)
  ti.answer((req) => ({ status: 200, body: `answer for ${req.url}` }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const paths = ['/v2/store/a', '/v2/store/%61', '/v2/store/A', '/v2/store/a?q=a+b', '/v2/store/a?q=a%20b', '/v2/store/a?q=a b'.replace(' ', '%2B'),
    '/v2/store/a?', '/v2/store/a?x=1&y=2', '/v2/store/a?y=2&x=1', '/v2/store/a/']
  for (const p of paths) {
    const first = await s.get(p)
    if (first.status !== 200) continue
    const again = await s.get(p)
    t.equal(again.body, first.body, `${p}: its own answer`)
    const forwarded = ti.received.find((r) => first.body === `answer for ${r.url}`)
    t.ok(forwarded, `${p}: TI's answer for what it was sent`)
  }
  const bodies = new Set(ti.received.map((r) => r.url))
  t.equal(bodies.size, ti.received.length, 'each path reached TI once')
})

t.test('PROBE: a GET\'s body is not forwarded, so it cannot make an answer another\'s', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  const one = await request(s.proxyUrl + '/v2/store/a', { method: 'GET', body: 'query one', headers: { 'content-type': 'text/plain' } })
  await one.body.text()
  const two = await request(s.proxyUrl + '/v2/store/a', { method: 'GET', body: 'query two', headers: { 'content-type': 'text/plain' } })
  await two.body.text()
  t.match(String(two.headers['cache-status']), '; hit')
  t.equal(ti.received.length, 1)
  t.equal(ti.received[0]?.headers['content-length'], undefined, 'TI got no body')
  t.equal(ti.received[0]?.headers['transfer-encoding'], undefined, 'TI got no body')
})

t.test('PROBE: must-revalidate is never served stale; a 401 is never stored; a Cookie or no-store request bypasses', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { 'cache-control': 'max-age=60, must-revalidate' }, body: 'strict' }))
  const s = await cacheSidecar(t, ti, env('1/1h cache=1h stale=1d'))
  t.match((await s.get('/v2/store/a')).headers['cache-status'], '; stored; ttl=60')
  await s.advance(61_000)
  t.equal((await s.get('/v2/store/a')).status, 429, 'the budget refuses and the stale answer may not stand in')

  const ti2 = await startTi(t)
  ti2.answer(() => ({ status: 401, body: 'InvalidApiKeyForGivenResource' }))
  const s2 = await cacheSidecar(t, ti2, env('100/1h cache=1h'))
  t.equal((await s2.get('/v2/store/a')).status, 401)
  const sent = ti2.received.length
  t.equal((await s2.get('/v2/store/a')).status, 401)
  t.ok(ti2.received.length > sent, 'asked TI again: the 401 was not stored')
  ti2.answer(() => ({ status: 200, body: 'public' }))
  await s2.get('/v2/store/b')
  const before = ti2.received.length
  t.equal((await s2.get('/v2/store/b', { cookie: 'a=b' })).headers['cache-status'], undefined)
  t.equal((await s2.get('/v2/store/b', { 'cache-control': 'no-store' })).headers['cache-status'], undefined)
  t.equal(ti2.received.length, before + 2, 'both went to TI')
})
