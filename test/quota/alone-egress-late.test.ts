// Through HTTPS_PROXY a connect has a timeout per step (TCP, the CONNECT answer, TLS): a send
// decided alone just before the bound can reach TI long after it, while Redis ends this
// sidecar's hold a window after the bound. It is refused as it leaves once the bound has
// passed, unsent (fleet-departures.ts), whatever the connect took. Control: a prompt proxy.
import { createServer, type Server } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import type { Test } from 'tap'
import t from 'tap'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { startTlsFront } from '../helpers/recording-proxy.js'
import { startRedis } from '../helpers/redis.js'
import { STORE_HOST, TI_TLS, trustTestCa } from '../egress/setup.js'
import { quotaSidecar, spendingAlone } from './sidecar.js'

t.setTimeout(90_000)
trustTestCa()
const TIMING = { heartbeatMs: 100, presenceTtlMs: 300, freshGraceMs: 0 }
// Spending alone starts 1.5 s after Redis stops (timeout + TTL + a window).
const BOUND_MS = 4_000
// The CONNECT answer this late: the send leaves well past the bound, within the 10 s connect timeout.
const SLOW_MS = 6_000

/** A CONNECT proxy to `targetPort` that answers each CONNECT `delay()` ms late; `reset()` cuts every tunnel. */
async function delayingProxy (t: Test, targetPort: number, delay: () => number) {
  const sockets = new Set<Socket>()
  const proxy: Server = createServer()
  proxy.on('connect', (_req, client: Socket, head: Buffer) => {
    const target = connect(targetPort, '127.0.0.1')
    for (const s of [client, target]) {
      sockets.add(s)
      s.once('close', () => { sockets.delete(s) })
      s.on('error', () => { client.destroy(); target.destroy() })
    }
    setTimeout(() => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length > 0) target.write(head)
      client.pipe(target).pipe(client)
    }, delay())
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  const reset = (): void => { for (const s of sockets) s.destroy() }
  t.teardown(() => { reset(); proxy.close() })
  return { url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`, reset }
}

for (const slow of [true, false]) {
  t.test(slow ? 'a send decided alone whose connect ends past the bound is refused as it leaves, unsent' : 'control: a prompt connect, it goes', async (t) => {
    const redis = await startRedis(t)
    const upstream = await startRecordingUpstream(t)
    const front = await startTlsFront(t, Number(new URL(upstream.url).port), TI_TLS)
    let delayMs = 0
    const proxy = await delayingProxy(t, front, () => delayMs)
    const s = await quotaSidecar(t, {
      UPSTREAM_URL: `https://${STORE_HOST}`,
      HTTPS_PROXY: proxy.url,
      NO_PROXY: '127.0.0.1',
      UPSTREAM_QUEUE_TIMEOUT_MS: '30000',
      RATE_LIMITS: '* /v2/store/** 100/1s',
      RATE_LIMIT_MAX_WAIT_MS: '0',
      RATE_LIMIT_FLEET_SIZE: '2',
      RATE_LIMIT_ALONE_MAX_MS: String(BOUND_MS)
    }, { redisUrl: redis.url, systemClock: true, quotaTiming: TIMING, upstream })
    const stoppedAt = await spendingAlone(t, s, redis, '/v2/store/a')
    // The next send needs a new tunnel: the kept-alive ones are cut.
    if (slow) delayMs = SLOW_MS
    proxy.reset()
    const x = s.call('/v2/store/a', 'X')
    const decidedMs = Date.now() - stoppedAt
    t.ok(decidedMs < BOUND_MS, `X asked for within the bound (${decidedMs} ms after Redis stopped)`)
    const rx = await x
    const answeredMs = Date.now() - stoppedAt
    if (!slow) {
      t.same([rx.status, s.upstream.seen('X').length], [200, 1], `sent (${answeredMs} ms after Redis stopped)`)
      return
    }
    t.equal(s.upstream.seen('X').length, 0, `X never reached TI (answered ${answeredMs} ms after Redis stopped)`)
    t.equal(rx.status, 429, 'refused')
    t.match(rx.body, /waited to be sent.*RATE_LIMIT_ALONE_MAX_MS.*not sent/, 'past the alone bound by the time it could leave')
  })
}
