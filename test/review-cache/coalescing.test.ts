// Review of the read cache: one fetch per key, and what a request that waited for another's
// fetch is told. Regression tests failed on the code reviewed (each defect
// fixed since); PROBE tests passed on it.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { cacheSidecar, startTi, type CacheSidecar, type Ti } from '../cache/fixture.js'

const env = (limits: string, more: Record<string, string> = {}): Record<string, string> =>
  ({ RATE_LIMITS: `GET /v2/store/** ${limits}`, RATE_LIMIT_MAX_WAIT_MS: '0', ...more })

async function heldAtTi (t: Test, ti: Ti, n: number): Promise<void> {
  await eventually(t, `${n} request(s) held at TI`, () => ti.waiting() >= n)
}

async function inFlight (t: Test, s: CacheSidecar, n: number): Promise<void> {
  await eventually(t, `${n} requests in flight at the sidecar`, async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) >= n)
}

t.test('Regression: waiters released by a fetch that stored nothing all fetch at once: no new leader, one TI call each', async (t) => {
  const ti = await startTi(t)
  let n = 0
  ti.answer(() => (n++ === 0 ? { status: 503, body: 'busy' } : { status: 200, body: 'the catalog' }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  ti.hold()
  const leader = s.get('/v2/store/a')
  await heldAtTi(t, ti, 1)
  const waiters = Array.from({ length: 5 }, async () => await s.get('/v2/store/a'))
  await inFlight(t, s, 6)
  ti.release()
  t.equal((await leader).status, 503)
  // Since the features-meet case 5 a failed fetch answers all its waiters with its failure, within
  // one fetch's time (a retry each, or one after another, could outlast IDLE_TIMEOUT_MS).
  const answers = await Promise.all(waiters)
  t.same(answers.map((a) => `${a.status} ${a.body}`), answers.map(() => '503 busy'))
  t.equal(ti.received.length, 1, `TI saw the failed fetch only (it saw ${ti.received.length})`)
})

t.test('Regression: a waiter of a fetch whose answer TI marks max-age=0 is told detail=stale-error (and counted stale), though TI did not fail', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { 'cache-control': 'max-age=0' }, body: 'now' }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h stale=1h'))
  ti.hold()
  const leader = s.get('/v2/store/a')
  await heldAtTi(t, ti, 1)
  const waiter = s.get('/v2/store/a')
  await inFlight(t, s, 2)
  ti.release()
  t.equal((await leader).headers['cache-status'], 'store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=0')
  const w = await waiter
  t.equal(w.body, 'now')
  t.notMatch(String(w.headers['cache-status']), 'stale-error', 'TI answered 200: there was no error')
  const m = await s.metrics()
  t.equal(m.get(seriesKey('store_auth_proxy_cache_requests_total', { rule: 'GET /v2/store/**', result: 'stale' })) ?? 0, 0,
    'no stale answer counted (StoreAuthProxyServingStale would fire)')
})

t.test('PROBE: 60 waiters and a leader that leaves after its request is written: one TI call, no MaxListeners warning, every waiter answered', async (t) => {
  const warnings: Error[] = []
  const onWarning = (w: Error): void => { warnings.push(w) }
  process.on('warning', onWarning)
  t.teardown(() => { process.removeListener('warning', onWarning) })
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('1/1h cache=1h'))
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/a', { signal: leaver.signal }).catch(() => 'left')
  await heldAtTi(t, ti, 1)
  const waiters = Array.from({ length: 60 }, async () => await s.get('/v2/store/a'))
  await inFlight(t, s, 61)
  leaver.abort()
  t.equal(await left, 'left')
  ti.release()
  const answers = await Promise.all(waiters)
  t.same(new Set(answers.map((a) => a.status)), new Set([200]))
  t.equal(ti.received.length, 1)
  t.same(warnings.filter((w) => w.name === 'MaxListenersExceededWarning'), [])
  // The leader's point was spent (its request reached TI): a miss for another key is refused.
  t.equal((await s.get('/v2/store/b')).status, 429, 'the fill that outlived its caller still counts')
})

t.test('PROBE: waiters leaving before, during and after the fetch: the rest are answered, and nothing hangs', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  ti.hold()
  const leader = s.get('/v2/store/a')
  await heldAtTi(t, ti, 1)
  const leavers = Array.from({ length: 10 }, () => new AbortController())
  const gone = leavers.map(async (c) => await request(s.proxyUrl + '/v2/store/a', { signal: c.signal }).then(() => 'answered', () => 'left'))
  const stayers = Array.from({ length: 10 }, async () => await s.get('/v2/store/a'))
  await inFlight(t, s, 21)
  for (const c of leavers.slice(0, 5)) c.abort()
  ti.release()
  for (const c of leavers.slice(5)) c.abort()
  await Promise.all(gone)
  t.equal((await leader).status, 200)
  t.same((await Promise.all(stayers)).map((a) => a.status), Array(10).fill(200))
  t.equal(ti.received.length, 1)
  await eventually(t, 'no request left in flight', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 0)
})

t.test('Regression: waiters that TI\'s Vary tells apart from the fetch they waited for all fetch at once, though they ask the same', async (t) => {
  const ti = await startTi(t)
  ti.answer((req) => ({ status: 200, headers: { vary: 'X-Tenant' }, body: `for ${String(req.headers['x-tenant'])}` }))
  const s = await cacheSidecar(t, ti, env('100/1h cache=1h'))
  ti.hold()
  const one = s.get('/v2/store/a', { 'x-tenant': 'one' })
  await heldAtTi(t, ti, 1)
  const twos = Array.from({ length: 5 }, async () => await s.get('/v2/store/a', { 'x-tenant': 'two' }))
  await inFlight(t, s, 6)
  ti.release()
  t.equal((await one).body, 'for one')
  t.same((await Promise.all(twos)).map((a) => a.body), Array(5).fill('for two'))
  t.equal(ti.received.filter((r) => r.headers['x-tenant'] === 'two').length, 1,
    `one fetch for tenant two's five identical requests (TI saw ${ti.received.filter((r) => r.headers['x-tenant'] === 'two').length})`)
})
