// Review of the read cache: a token revoked while requests wait for another's fetch. Regression
// tests failed on the code reviewed (each defect fixed since); PROBE tests passed on it.
import t from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { cacheSidecar, startTi } from '../cache/fixture.js'

const ENV = { RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' }

t.test('Regression: waiters go on with the token they took before waiting, though the fetch they waited for had it refused: a 401 and a replay each', async (t) => {
  const ti = await startTi(t)
  let revoked: string | undefined
  ti.answer((req) => {
    revoked ??= req.headers.authorization
    return req.headers.authorization === revoked ? { status: 401, body: 'revoked' } : { status: 200, body: 'the catalog' }
  })
  const s = await cacheSidecar(t, ti, ENV)
  ti.hold()
  const leaver = new AbortController()
  const left = request(s.proxyUrl + '/v2/store/a', { signal: leaver.signal }).then(() => 'answered', () => 'left')
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 3 }, async () => await s.get('/v2/store/a'))
  await eventually(t, 'four requests in flight', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 4)
  leaver.abort()
  t.equal(await left, 'left')
  await eventually(t, 'the leaver gone', async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 3)
  ti.release()
  const answers = await Promise.all(waiters)
  t.same(answers.map((a) => a.status), [200, 200, 200])
  const refused = ti.received.filter((r) => r.headers.authorization === revoked).length
  t.equal(refused, 1, `TI got the revoked token once (it got it ${refused} times: each a budget point)`)
})
