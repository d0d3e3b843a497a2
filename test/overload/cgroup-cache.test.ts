// The built sidecar, run as the image runs it, inside a memory cgroup of its own of 128 MiB
// (test/helpers/cgroup-sidecar.ts), with a cache= rule at the default CACHE_MAX_BYTES: the
// read cache filled with many small distinct answers must never make it refuse callers.
// Asserted: no request of the fill answered 503 OVERLOADED, ordinary requests admitted after
// it (a hit, a miss, one of a rule without cache=), /livez answering, alive throughout.
//
// An outside review found a cache full of small entries (counted ~400 B, costing 1.1 KB and
// more of live memory each) held live memory over the overload high water: every request shed
// (before the fix: 30,062 of 50,000 answered 503, live memory 60 MiB after; 2026-12-02).
//
// 30–60 s with both cores busy (load 12; 2026-12-02): the file gets 300 s. Needs root and a
// memory cgroup this process may make a child of; skipped elsewhere.
import t from 'tap'
import { Pool } from 'undici'
import { setUpCgroup, startInCgroup } from '../helpers/cgroup-sidecar.js'
import { scrape } from '../helpers/metrics-scrape.js'

/** Distinct small answers: twice what the bound now holds; on main, shedding began after ~21,000. */
const FILL = 50_000
const CONCURRENCY = 32
const CACHED = 'GET /cached/** 1000000/1s cache=1h'
const PLAIN = 'GET /plain/** 1000000/1s'

const cgroup = setUpCgroup()
t.setTimeout(300_000)

t.test('a cache full of small entries at the defaults: callers still admitted inside a 128 MiB memory cgroup', { skip: typeof cgroup === 'string' ? cgroup : false }, async (t) => {
  if (typeof cgroup === 'string') return
  const sidecar = await startInCgroup(t, cgroup, { RATE_LIMITS: `${CACHED}; ${PLAIN}`, ACCESS_LOG: 'false' })
  if (sidecar === undefined) return
  const { port, adminPort, alive } = sidecar
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONCURRENCY })
  t.teardown(() => pool.destroy())
  const statuses: Record<string, number> = {}
  const get = async (path: string): Promise<number> => {
    const res = await pool.request({ method: 'GET', path })
    await res.body.dump()
    statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1
    return res.statusCode
  }

  const mib = (bytes: number | undefined): string => ((bytes ?? NaN) / 2 ** 20).toFixed(1)
  const memory = async (): Promise<string> => {
    const m = await scrape(`http://127.0.0.1:${adminPort}`)
    return `cache ${mib(m.get('store_auth_proxy_cache_bytes{}'))} MiB counted, live memory ${mib(m.get('store_auth_proxy_memory_live_bytes{}'))} MiB, private ${mib(m.get('store_auth_proxy_memory_private_bytes{}'))} MiB`
  }
  t.comment(`before the fill: ${await memory()}`)
  let next = 0
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < FILL && alive()) await get(`/cached/part/${next++}`)
  }))
  t.ok(alive(), `alive after the fill (${cgroup.events()})`)
  t.same(statuses, { 200: FILL }, `every request of the fill answered 200, none shed (${JSON.stringify(statuses)})`)

  const after = await Promise.all([get('/cached/part/0'), get(`/cached/part/${FILL - 1}`), get('/cached/new'), get('/plain/x')])
  t.same(after, [200, 200, 200, 200], 'ordinary requests admitted after the fill: a hit, a miss, a rule without cache=')
  const livez = await fetch(`http://127.0.0.1:${adminPort}/livez`, { signal: AbortSignal.timeout(2000) })
  t.equal(livez.status, 200, '/livez answers')
  // /metrics, not /status: /status lists every copy held.
  const metrics = await scrape(`http://127.0.0.1:${adminPort}`)
  const live = metrics.get('store_auth_proxy_memory_live_bytes{}') ?? NaN
  t.equal(metrics.get('store_auth_proxy_overload_shedding{}'), 0, `not shedding (live memory ${(live / 2 ** 20).toFixed(1)} MiB)`)
  t.comment(`after the fill: ${await memory()}, cgroup peak ${mib(cgroup.peakBytes())} MiB`)
})
