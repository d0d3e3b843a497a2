// A send Redis admitted that waits for a connection while Redis freezes is refused as it
// leaves: the fleet has it from its take and cannot be told it left late (fleet-departures.ts).
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { startRedis } from '../helpers/redis.js'
import { fillPool, sleep, startUpstream, untilShared } from './late-upstream.js'

/**
 * Through Redis, `GET /x 2/1s`: admitted, the send waits for a connection (the pool full) and
 * Redis freezes meanwhile (SIGSTOP: still counted shared, nothing answered). Redis has it from
 * its take and cannot be told it left late: another sidecar could spend its place while TI
 * still counts it. It is refused as it leaves, nothing written; the control (Redis answering)
 * goes, re-timed.
 */
async function waitsWhileRedis (t: Test, freeze: boolean): Promise<{ status: number, body: string, arrivals: number[], metrics: string }> {
  const redis = await startRedis(t)
  const upstream = await startUpstream(t)
  const sidecar = await startSidecar(t, upstream.url, { RATE_LIMITS: 'GET /x 2/1s', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_FLEET_SIZE: '2' })
  await untilShared(sidecar.adminUrl)
  const slow = await fillPool(sidecar.proxyUrl, upstream)
  const answer = request(`${sidecar.proxyUrl}/x`).then(async (res) => ({ status: res.statusCode, body: await res.body.text() }))
  // Frozen only once Redis has admitted it (its log holds the send).
  const client = new Redis(redis.url)
  for (let i = 0; (await client.keys('*:log:2/1s:*')).length === 0; i++) {
    if (i === 500) throw new Error('never admitted')
    await sleep(10)
  }
  client.disconnect()
  if (freeze) redis.freeze()
  const { status, body } = await answer
  if (freeze) redis.thaw()
  await Promise.all(slow)
  const metrics = await (await request(`${sidecar.adminUrl}/metrics`)).body.text()
  return { status, body, arrivals: upstream.arrivals, metrics }
}

t.test('through Redis: a send that waited while Redis froze is refused as it leaves, never sent', async (t) => {
  const { status, body, arrivals, metrics } = await waitsWhileRedis(t, true)
  t.equal(status, 429)
  t.match(body, /"error":"UPSTREAM_RATE_LIMITED".*waited to be sent until .*\(rate-limit redis stopped answering\), so it was not sent/)
  t.same(arrivals, [], 'TI got nothing')
  t.match(metrics, /store_auth_proxy_rate_limited_total\{rule="GET \/x",reason="degraded",action="refused"\} 1/)
})

t.test('control, through Redis answering: the send that waited goes', async (t) => {
  const { status, arrivals } = await waitsWhileRedis(t, false)
  t.equal(status, 200)
  t.equal(arrivals.length, 1)
})
