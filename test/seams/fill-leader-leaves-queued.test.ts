// A cache fill whose caller leaves while the fill waits in the upstream queue. Nothing was sent
// for it, so its budget point goes back and the fill is abandoned: those who waited for it go
// on by themselves, one of them leading the next fetch, and are answered with TI's catalog.
// (Found by an outside review: the waiters were told the fill had failed, 502, and TI was
// never asked.)
import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { cacheSidecar, CATALOG, inFlight, startTi } from '../cache/fixture.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'

t.test('the leader\'s caller leaves while its fill is queued: its waiter leads the next fetch and gets the catalog', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, {
    RATE_LIMITS: 'GET /v2/store/** 1000/1h cache=1h',
    UPSTREAM_QUEUE_TIMEOUT_MS: '20000',
    UPSTREAM_TIMEOUT_MS: '20000',
    RATE_LIMIT_MAX_WAIT_MS: '0'
  })
  ti.hold()
  const held = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => {
    const res = await request(s.proxyUrl + `/v2/store/held/${i}`)
    await res.body.dump()
    return res.statusCode
  })
  await eventually(t, 'every connection holds a request', () => ti.waiting() === UPSTREAM_CONNECTIONS)
  const queued = async (): Promise<number> => (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_upstream_queued_requests', {})) ?? -1
  const leader = new AbortController()
  const led = request(s.proxyUrl + CATALOG, { signal: leader.signal }).then(async (r) => { await r.body.dump(); return r.statusCode }, () => 'aborted')
  await eventually(t, 'the leader\'s fill waits for a connection', async () => await queued() === 1)
  const waiter = request(s.proxyUrl + CATALOG).then(async (r) => ({ status: r.statusCode, body: await r.body.text() }))
  await inFlight(t, s, UPSTREAM_CONNECTIONS + 2)
  leader.abort()
  t.equal(await led, 'aborted')
  await inFlight(t, s, UPSTREAM_CONNECTIONS + 1)
  ti.release()
  t.same(await Promise.all(held), Array(UPSTREAM_CONNECTIONS).fill(200))
  const w = await waiter
  t.equal(w.status, 200, `the waiter is answered with the catalog (got ${w.status} ${w.body.slice(0, 200)})`)
  t.equal(ti.received.filter((r) => r.url === CATALOG).length, 1, 'fetched once: by the waiter, the leader\'s fill went unsent')
})
