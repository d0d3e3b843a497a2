// A fetch this sidecar led counts one cache result as its flight ends, whatever ended it: here,
// its caller left while it waited for its budget, and its waiter left with it.
import t from 'tap'
import { Agent, request } from 'undici'
import { seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { eventually } from '../helpers/eventually.js'
import { cacheSidecar, inFlight, startTi } from './fixture.js'

const RULE = 'GET /v2/store/**'
const results = (m: Samples): Record<string, number> => Object.fromEntries(['hit', 'coalesced', 'stale', 'miss']
  .map((result) => [result, m.get(seriesKey('store_auth_proxy_cache_requests_total', { rule: RULE, result })) ?? 0]))

t.test('a fetch whose caller left while it waited for its budget: one miss, none for its waiter', async (t) => {
  const ti = await startTi(t)
  // One send a minute, waited for up to 90 s: the second key's fetch waits on the sidecar's fake clock.
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: `${RULE} 1/1m cache=1h`, RATE_LIMIT_MAX_WAIT_MS: '90000', IDLE_TIMEOUT_MS: '300000' })
  t.equal((await s.get('/v2/store/a')).status, 200)
  t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 1 })

  const agent = new Agent()
  t.teardown(() => agent.destroy())
  const leaving = [new AbortController(), new AbortController()]
  const callers = leaving.map(async (caller) =>
    await request(s.proxyUrl + '/v2/store/b', { signal: caller.signal, dispatcher: agent }).catch(() => 'left'))
  await inFlight(t, s, 2)
  for (const caller of leaving) caller.abort()
  t.same(await Promise.all(callers), ['left', 'left'])
  await inFlight(t, s, 0)
  await eventually(t, 'the abandoned fetch counted', async () => results(await s.metrics()).miss === 2)
  t.same(results(await s.metrics()), { hit: 0, coalesced: 0, stale: 0, miss: 2 }, 'its waiter, gone, counts nothing')
  t.equal(ti.received.length, 1, 'nothing sent for /b')
})
