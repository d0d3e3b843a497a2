// Review of the read cache: HEAD on a rule with cache= and a tight budget (the catalog's 1/4h).
// Regression tests failed on the code reviewed (each defect
// fixed since); PROBE tests passed on it.
import t from 'tap'
import { eventually } from '../helpers/eventually.js'
import { CATALOG, cacheSidecar, catalogBody, startTi } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: `GET ${CATALOG} 1/4h cache=4h stale=1d`, RATE_LIMIT_MAX_WAIT_MS: '0' }

t.test('Regression: a HEAD that finds nothing spends the catalog\'s one call and stores nothing: the GETs after it get 429 for four hours', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  const head = await s.get(CATALOG, {}, 'HEAD')
  t.equal(head.status, 200)
  const get = await s.get(CATALOG)
  t.equal(get.status, 200, `the first GET after a HEAD got ${get.status}`)
  t.equal(get.body, catalogBody())
  t.equal(ti.received.length, 1, 'one call to TI serves both (a HEAD miss fetched as a GET, as nginx\'s proxy_cache_convert_head does)')
})

t.test('Regression: a HEAD during the catalog\'s fetch does not wait for it: it asks the spent budget and gets 429', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const get = s.get(CATALOG)
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const head = s.get(CATALOG, {}, 'HEAD')
  await new Promise((resolve) => setTimeout(resolve, 100))
  ti.release()
  t.equal((await get).status, 200)
  const h = await head
  t.equal(h.status, 200, `the HEAD got ${h.status} (${String(h.headers['cache-status'])})`)
  t.equal(h.headers['content-length'], String(catalogBody().length))
  t.equal(ti.received.length, 1)
})
