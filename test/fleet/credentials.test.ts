// Redis keys carry sha256(AUTH_URL + '\n' + CLIENT_ID), so sidecars on
// one credential share budgets and cool-downs and sidecars on different credentials never
// do, even on one Redis: another CLIENT_ID, or the same CLIENT_ID at another token endpoint.
import t from 'tap'
import { CLIENT_ID } from '../helpers/build.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'
import { startRedis } from '../helpers/redis.js'
import { callVia, eventually, nextId, startArrivalUpstream, startSidecar, statusOf } from './fleet.js'

t.setTimeout(120_000)

t.test('one Redis, three credentials: budgets and cool-downs shared only within a credential', async (t) => {
  const redis = await startRedis(t)
  const upstream = await startArrivalUpstream(t)
  const auth1 = await startRecordingTokenEndpoint(t)
  const auth2 = await startRecordingTokenEndpoint(t)
  const base = { UPSTREAM_URL: upstream.url, RATE_LIMITS: '* /v2/store/** 2/1m', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: '2000', ACCESS_LOG: 'false' }
  const a = await startSidecar(t, 'A', { ...base, AUTH_URL: auth1.url })
  const twin = await startSidecar(t, 'twin', { ...base, AUTH_URL: auth1.url })
  const otherClient = await startSidecar(t, 'other-client', { ...base, AUTH_URL: auth1.url, CLIENT_ID: `${CLIENT_ID}-2` })
  const otherAuth = await startSidecar(t, 'other-auth', { ...base, AUTH_URL: auth2.url })
  const all = [a, twin, otherClient, otherAuth]
  for (const s of all) await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (b) => b === 'redis')

  const budget = [await callVia(a, '/v2/store/orders'), await callVia(twin, '/v2/store/orders'), await callVia(a, '/v2/store/orders')]
  t.same(budget.map((s) => s.status), [200, 200, 429], 'A and its twin (one credential) share the budget of 2')
  t.same([await callVia(otherClient, '/v2/store/orders'), await callVia(otherClient, '/v2/store/orders')].map((s) => s.status), [200, 200],
    'another CLIENT_ID at the same token endpoint has a budget of its own')
  t.same([await callVia(otherAuth, '/v2/store/orders'), await callVia(otherAuth, '/v2/store/orders')].map((s) => s.status), [200, 200],
    'the same CLIENT_ID at another token endpoint has a budget of its own')

  // A cool-down (outside the rule: scope `upstream`) started through A.
  const id = nextId('limited')
  upstream.plan(id, { status: 429, headers: { 'retry-after': '60' }, body: '' })
  t.equal((await callVia(a, '/other', { id })).status, 429, 'the gateway\'s 429 through A')
  const sent = upstream.arrivals.length
  const twinCall = await callVia(twin, '/other')
  t.equal(twinCall.status, 429, 'the twin is cooled down too')
  t.equal(upstream.arrivals.length, sent, 'and sent nothing')
  t.same([(await callVia(otherClient, '/other')).status, (await callVia(otherAuth, '/other')).status], [200, 200], 'the other credentials are not cooled down')
})
