// A fill whose own caller leaves: what its waiters get and what is counted. A caller leaving is
// no failure of TI's: an answer that cannot be stored sends the waiters to TI by themselves,
// a stored one serves them, a stale copy never stands in for it, and the fetch counts one result.
import t, { type Test } from 'tap'
import { Agent, request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { cacheSidecar, catalogBody, inFlight, startTi, type CacheSidecar, type Ti } from './fixture.js'

const RULE = 'GET /v2/store/**'
const counted = (m: Samples, result: string): number => m.get(seriesKey('store_auth_proxy_cache_requests_total', { rule: RULE, result })) ?? 0
const json = { 'content-type': 'application/json' }

/** A caller of `path` that leaves once its fill is held at TI, with a waiter arrived meanwhile. */
async function leaderLeaves (t: Test, ti: Ti, s: CacheSidecar, path: string) {
  // Its own connections, closed before the sidecar is (a pooled one left open would hold its close).
  const agent = new Agent()
  t.teardown(() => agent.destroy())
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + path, { signal: leaver.signal, dispatcher: agent }).catch(() => 'left')
  await eventually(t, 'the fill held at TI', () => ti.waiting() === 1)
  const waiter = request(s.proxyUrl + path, { dispatcher: agent })
    .then(async (r) => ({ status: r.statusCode, headers: r.headers, body: await r.body.text() }))
  await inFlight(t, s, 2)
  leaver.abort()
  t.equal(await left, 'left')
  await inFlight(t, s, 1)
  ti.release()
  return await waiter
}

t.test('a streamed fill whose caller leaves mid-answer counts one miss; the next caller fetches again', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: json, body: catalogBody(5_000), stallAfter: 3_000 }))
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: `${RULE} 100/1h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0', CACHE_ENTRY_MAX_BYTES: '2048' })
  const res = await request(s.proxyUrl + '/v2/store/big')
  t.equal(res.statusCode, 200)
  t.equal(res.headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; detail=too-large')
  res.body.destroy()
  await inFlight(t, s, 0)
  // The sidecar saw the caller leave (its exchange counted as it closed).
  await eventually(t, 'the aborted answer is counted', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_total', { method: 'GET', outcome: 'aborted', status_class: '2xx' })) ?? 0) === 1)
  ti.answer(() => ({ status: 200, headers: json, body: 'small' }))
  const again = await s.get('/v2/store/big')
  t.equal(again.body, 'small', 'nothing of the first answer was stored')
  t.equal(counted(await s.metrics(), 'miss'), 2, 'one miss for each fetch, the one whose caller left included')
  t.equal(ti.received.length, 2)
})

for (const [why, answer] of [
  ['too large to store', { status: 200, headers: json, body: catalogBody(5_000) }],
  ['no-store', { status: 200, headers: { 'cache-control': 'no-store' }, body: 'fine' }]
] as const) {
  t.test(`TI answers 200 ${why} after the fill's caller left: the waiter fetches by itself, never told TI failed`, async (t) => {
    const ti = await startTi(t)
    ti.answer(() => answer)
    const s = await cacheSidecar(t, ti, { RATE_LIMITS: `${RULE} 100/1h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0', CACHE_ENTRY_MAX_BYTES: '2048' })
    const waiter = await leaderLeaves(t, ti, s, '/v2/store/a')
    t.equal(`${waiter.status} ${waiter.body}`, `200 ${answer.body}`, 'TI\'s answer, not a 502')
    t.equal(ti.received.length, 2, 'the waiter asked TI itself')
    t.equal(counted(await s.metrics(), 'miss'), 2, 'one miss per fetch')
  })
}

t.test('a refresh whose caller left, TI answering 200 no-store: the stale copy does not stand in, nothing counted stale', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, body: 'old' }))
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: `${RULE} 100/1h cache=1s stale=1h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.get('/v2/store/x')).body, 'old')
  await s.advance(2_000)
  ti.answer(() => ({ status: 200, headers: { 'cache-control': 'no-store' }, body: 'new' }))
  const waiter = await leaderLeaves(t, ti, s, '/v2/store/x')
  t.equal(`${waiter.status} ${waiter.body}`, '200 new')
  t.notMatch(String(waiter.headers['cache-status']), 'stale-error', 'TI answered 200: there was no error')
  t.equal(counted(await s.metrics(), 'stale'), 0, 'no stale answer counted (StoreAuthProxyServingStale)')
})

t.test('a fill whose caller left after its request reached TI: its answer is stored, and counted as the miss it was', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: `${RULE} 100/1h cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '0' })
  const agent = new Agent()
  t.teardown(() => agent.destroy())
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/x', { signal: leaver.signal, dispatcher: agent }).catch(() => 'left')
  await eventually(t, 'the fill held at TI', () => ti.waiting() === 1)
  leaver.abort()
  t.equal(await left, 'left')
  await inFlight(t, s, 0)
  ti.release()
  await eventually(t, 'stored', async () => ((await s.metrics()).get(seriesKey('store_auth_proxy_cache_stores_total', { rule: RULE })) ?? 0) === 1)
  t.match((await s.get('/v2/store/x')).headers['cache-status'], /; hit/)
  const m = await s.metrics()
  t.same([counted(m, 'miss'), counted(m, 'hit')], [1, 1], 'two callers, two results')
})
