// A validator is not a reason to fetch alone: HTTP clients with a cache of their own send
// If-None-Match or If-Modified-Since on every GET, and TI's 404 to one of them is every waiter's
// answer. Only what a Range or a condition causes (416, 412) is the fetching caller's own. Found
// by an outside review: any 4xx to such a fetch sent each waiter to TI in turn, N calls for N
// callers, and the last ones past IDLE_TIMEOUT_MS with no status line.
import t from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { ONE_FETCH_ENV, cacheSidecar, inFlight, startTi, type CacheSidecar } from '../cache/fixture.js'

const PATH = '/v2/store/a'
const ENV = ONE_FETCH_ENV
const VALIDATOR = { 'if-none-match': '"v1"' }
const NOT_FOUND = { status: 404, headers: { 'content-type': 'application/json' }, body: '{"error":"no such product"}' }

async function get (s: CacheSidecar): Promise<number | 'no status line'> {
  try {
    const res = await request(s.proxyUrl + PATH, { headers: VALIDATOR })
    await res.body.text()
    return res.statusCode
  } catch {
    return 'no status line'
  }
}

t.test('six callers with If-None-Match wait for one fetch that TI answers 404: one request to TI', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const leader = get(s)
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 5 }, async () => await get(s))
  await inFlight(t, s, 6)
  ti.answer(() => NOT_FOUND)
  ti.release()
  const all = [await leader, ...await Promise.all(waiters)]
  t.same(all, [404, 404, 404, 404, 404, 404])
  t.equal(ti.received.length, 1, `TI gets one request for the six (got ${ti.received.length})`)
})

t.test('the same with TI taking 1.2 s per answer: every caller answered within IDLE_TIMEOUT_MS', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.answer(() => NOT_FOUND)
  ti.hold()
  const slow = setInterval(() => { ti.release(); ti.hold() }, 1200)
  t.teardown(() => { clearInterval(slow); ti.release() })
  const leader = get(s)
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 5 }, async () => await get(s))
  const all = [await leader, ...await Promise.all(waiters)]
  t.same(all, [404, 404, 404, 404, 404, 404], `statuses: ${JSON.stringify(all)}`)
})
