// Nothing of a request's body, nor of a 401 held back for its replay, stays reachable once the
// answer is sent, while the callers' keep-alive connections stay open: what the loads leave is
// garbage a collection frees, not memory the overload manager would count as live for ever.
import t from 'tap'
import { Pool } from 'undici'
import { startLoadUpstream } from '../../bench/lib/four-loads.js'
import { fullCollection, liveBytes } from '../../src/overload/manager.js'
import { startSidecar } from '../helpers/build.js'

const CALLERS = 300
const POSTS = 300
const POST_BYTES = 60 * 1024
const DENIED = 1500
const DENIED_BODY_BYTES = 10 * 1024
const MiB = 1024 * 1024

const collect = fullCollection()
/** Live memory after full collections: what is still reachable. */
function reachable (): number {
  collect()
  collect()
  return liveBytes()
}

t.test('after the answers, request bodies and held-back 401s are not reachable', async (t) => {
  const upstream = startLoadUpstream()
  t.teardown(upstream.close)
  // The manager off: nothing shed, every request goes the whole way.
  const { proxyUrl } = await startSidecar(t, `http://127.0.0.1:${await upstream.port}`, { MAX_IN_FLIGHT_REQUESTS: '0', MEMORY_LIMIT_BYTES: '0' })
  const pool = new Pool(proxyUrl, { connections: CALLERS, keepAliveTimeout: 600_000 })
  t.teardown(() => pool.destroy())
  const body = 'x'.repeat(POST_BYTES)
  const calls = async (n: number, request: Parameters<Pool['request']>[0]): Promise<number[]> =>
    await Promise.all(Array.from({ length: n }, async () => {
      const res = await pool.request(request)
      await res.body.dump()
      return res.statusCode
    }))
  const post = { path: '/v2/store/orders', method: 'POST', body, headers: { 'content-type': 'application/json' } } as const
  const get = { path: '/v2/store/products/a', method: 'GET' } as const
  // Warm: every connection open, every code path compiled, the token held.
  await calls(POSTS, post)
  upstream.deny(true)
  await calls(CALLERS, get)
  upstream.deny(false)

  const before = reachable()
  t.same(new Set(await calls(POSTS, post)), new Set([200]))
  const afterPosts = reachable()
  upstream.deny(true)
  t.same(new Set(await calls(DENIED, get)), new Set([401]), 'each 401 held back, replayed with a new token, then passed on')
  const afterDenied = reachable()
  t.comment(`reachable: ${(before / MiB).toFixed(1)} MiB; after ${POSTS} POSTs of 60 KB ${((afterPosts - before) / MiB).toFixed(2)} MiB more; after ${DENIED} held-back 401s of 10 KB ${((afterDenied - afterPosts) / MiB).toFixed(2)} MiB more`)
  // A quarter of what the bodies would hold if they stayed: room for noise, none for a leak.
  t.ok(afterPosts - before < POSTS * POST_BYTES / 4, 'the POSTs\' bodies are not reachable')
  t.ok(afterDenied - afterPosts < DENIED * DENIED_BODY_BYTES / 4, 'the held-back 401s are not reachable')
})
