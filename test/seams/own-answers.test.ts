// A failed fetch answers everyone who waited for it, here and for a moment in the fleet
// (where the features meet, case 5), but only a failure that is theirs too. Found by an outside review:
// a 4xx that the fetching caller's own Range or condition caused (416, 412) was handed to
// callers who asked for the whole answer, and a sidecar's own trouble (no token of its own)
// was left in the fleet's claim for other, healthy sidecars' callers.
import t from 'tap'
import { startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRedis } from '../helpers/redis.js'
import { fleetSidecar } from '../cache/fleet-ready.js'
import { CATALOG, DAY, cacheSidecar, catalogBody, inFlight, startTi, type Ti, type TiAnswer } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: `GET ${CATALOG} 100/1h cache=4h stale=1d`, RATE_LIMIT_MAX_WAIT_MS: '0' }

/** TI as a server with ranges and validators: a Range past the end is 416, an If-Match that differs 412. */
function rangesAndConditions (ti: Ti): void {
  ti.answer((req): TiAnswer => {
    if (req.headers.range !== undefined) return { status: 416, headers: { 'content-type': 'text/plain', 'content-range': 'bytes */8000' }, body: 'range not satisfiable' }
    if (req.headers['if-match'] !== undefined) return { status: 412, headers: { 'content-type': 'text/plain' }, body: 'precondition failed' }
    return { status: 200, headers: { 'content-type': 'application/json', etag: '"v1"' }, body: catalogBody() }
  })
}

for (const [name, headers, status] of [['Range', { range: 'bytes=999999-' }, 416], ['If-Match', { 'if-match': '"v0"' }, 412]] as const) {
  t.test(`one sidecar: the fetch of a caller with ${name} gets ${status}; a caller waiting for it without one gets the catalog`, async (t) => {
    const ti = await startTi(t)
    rangesAndConditions(ti)
    const s = await cacheSidecar(t, ti, ENV)
    ti.hold()
    const leader = s.get(CATALOG, headers)
    await eventually(t, 'the leader\'s fetch is at TI', () => ti.waiting() === 1)
    const waiter = s.get(CATALOG)
    await inFlight(t, s, 2)
    ti.release()
    t.equal((await leader).status, status, 'the leader gets TI\'s answer to its request')
    const w = await waiter
    t.equal(w.status, 200, 'the waiter fetched for itself')
    t.equal(w.body, catalogBody())
    t.equal(ti.received.length, 2)
  })
}

t.test('fleet: a Range fetch\'s 416 is not left for other sidecars\' callers', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  rangesAndConditions(ti)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const a = await fleetSidecar(t, ti, ENV, options)
  const b = await fleetSidecar(t, ti, ENV, options)
  t.equal((await a.get(CATALOG, { range: 'bytes=999999-' })).status, 416)
  const plain = await b.get(CATALOG)
  t.equal(plain.status, 200, 'the next caller, on another sidecar, gets the catalog')
  t.match(plain.headers['cache-status'], /fwd=miss; fwd-status=200; stored/, '... fetched and stored for the fleet')
})

t.test('fleet: a sidecar without a token of its own leaves its failure to itself; a healthy one fetches', async (t) => {
  const redis = await startRedis(t)
  const ti = await startTi(t)
  const standIn = await startStandIn(t, { tokenLifetimeMs: 3 * DAY })
  const options = { redisUrl: redis.url, authUrl: standIn.url, systemClock: true }
  const env = { ...ENV, TOKEN_WAIT_MS: '200' }
  const healthy = await fleetSidecar(t, ti, env, options)
  // The gateway now refuses the credentials the next sidecar starts with: it never gets a token.
  standIn.setClientSecret('rotated-elsewhere')
  const tokenless = await fleetSidecar(t, ti, env, options)
  const refused = await tokenless.get(CATALOG)
  t.equal(refused.status, 503)
  t.match(JSON.parse(refused.body), { error: 'TOKEN_UNAVAILABLE' })
  const other = await healthy.get(CATALOG)
  t.equal(other.status, 200, 'the healthy sidecar\'s caller is not handed the other\'s TOKEN_UNAVAILABLE')
  t.equal(ti.received.length, 1, 'it fetched: TI saw its one call')
})
