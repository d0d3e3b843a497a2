// RateLimit fields on every answer of a budgeted rule, also on the answers of callers
// who waited for another request's fetch of a cached key that failed: TI's error answer handed
// to them, or the sidecar's own (a timeout). They once went without the fields, which only the
// fetching caller's answer carried.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { cacheSidecar, inFlight, startTi, type CacheSidecar } from '../cache/fixture.js'

const PATH = '/v2/store/a'
const ENV = { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0', UPSTREAM_TIMEOUT_MS: '1000' }

interface Got { status: number, policy: unknown, rateLimit: unknown }

async function get (s: CacheSidecar): Promise<Got> {
  const res = await request(s.proxyUrl + PATH)
  await res.body.text()
  return { status: res.statusCode, policy: res.headers['ratelimit-policy'], rateLimit: res.headers.ratelimit }
}

/** One fetch held at TI and three callers waiting for it. */
async function waitingOnOne (t: Test, s: CacheSidecar): Promise<Array<Promise<Got>>> {
  const callers = [get(s)]
  await inFlight(t, s, 1)
  for (let i = 0; i < 3; i++) callers.push(get(s))
  await inFlight(t, s, 4)
  return callers
}

t.test('TI\'s 503 handed to the waiters: each answer carries the fields', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.answer(() => ({ status: 503, headers: { 'content-type': 'text/plain' }, body: 'down' }))
  ti.hold()
  const callers = await waitingOnOne(t, s)
  ti.release()
  const got = await Promise.all(callers)
  t.same(got.map((g) => g.status), [503, 503, 503, 503])
  for (const g of got) t.same([g.policy, g.rateLimit], ['"100/1h";q=100;w=3600', '"100/1h";r=99;t=3600'], 'the policy, and 99 left: one send for all four')
  t.equal(ti.received.length, 1)
})

t.test('the fetch timed out (504 UPSTREAM_TIMEOUT): each waiter\'s answer carries the fields', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const got = await Promise.all(await waitingOnOne(t, s))
  t.same(got.map((g) => g.status), [504, 504, 504, 504])
  for (const g of got) t.equal(g.rateLimit, '"100/1h";r=99;t=3600')
})
