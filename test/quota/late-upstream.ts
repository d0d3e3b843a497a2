// What the late-send tests share: an upstream that notes when each request of /x arrives
// while /slow/* calls hold the pool's connections, and the sidecar's status read until it shares.
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { request } from 'undici'

/** The upstream pool's connections (src/upstream/forward.ts): this many slow calls fill it. */
export const POOL = 128
/** How long each slow call holds its connection. */
export const SLOW_MS = 3_000

export const sleep = async (ms: number): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, ms)) }

/** An upstream that notes when each request of /x arrives; /slow/* answers after SLOW_MS. */
export interface Upstream { url: string, arrivals: number[], slowHeld: () => number }

export async function startUpstream (t: Test): Promise<Upstream> {
  const arrivals: number[] = []
  let slowHeld = 0
  const server = createServer((req, res) => {
    if (req.url?.startsWith('/slow') === true) {
      slowHeld++
      setTimeout(() => { res.end('slow') }, SLOW_MS)
      return
    }
    arrivals.push(performance.now())
    res.end('ok')
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, arrivals, slowHeld: () => slowHeld }
}

/** POOL slow calls through the sidecar, once each holds its connection (on a busy machine that takes a while). */
export async function fillPool (proxyUrl: string, upstream: Upstream): Promise<Array<Promise<number>>> {
  const slow = Array.from({ length: POOL }, (_, i) => get(`${proxyUrl}/slow/${i}`))
  for (let i = 0; upstream.slowHeld() < POOL; i++) {
    if (i === 1_000) throw new Error(`the pool never filled: ${upstream.slowHeld()} of ${POOL}`)
    await sleep(10)
  }
  return slow
}

/** The most arrivals in any interval of `ms`. */
export const mostIn = (arrivals: readonly number[], ms: number): number =>
  Math.max(0, ...arrivals.map((a) => arrivals.filter((b) => b >= a && b < a + ms).length))

export async function get (url: string): Promise<number> {
  const res = await request(url)
  await res.body.text()
  return res.statusCode
}

/** Waits until the sidecar shares its budgets through Redis (past the young tally's grace). */
export async function untilShared (adminUrl: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const status = await (await request(`${adminUrl}/status`)).body.json() as { rateLimits: { backend: string } }
    if (status.rateLimits.backend === 'redis') return
    await sleep(100)
  }
  throw new Error('never shared through Redis')
}
