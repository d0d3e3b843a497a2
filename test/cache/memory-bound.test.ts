// The read cache's bound against the memory limit: CACHE_MAX_BYTES, or CACHE_WATER of a limit
// too small for it, so a full cache fits under the overload manager's waters beside the rest
// of the sidecar; shown on /status, logged at start, and said by check-config. An outside
// review found the default CACHE_MAX_BYTES in the chart's 128 MiB limit made the sidecar shed
// every request once the cache was full.
import t from 'tap'
import { request } from 'undici'
import { cacheBound, cacheBoundWarnings } from '../../src/cache/memory-bound.js'
import { loadConfig } from '../../src/config/load.js'
import { DEFAULT_CACHE_MAX_BYTES } from '../../src/config/schema.js'
import { CACHE_WATER, LOW_WATER } from '../../src/overload/waters.js'
import { CLIENT_ID, CLIENT_SECRET, startSidecar } from '../helpers/build.js'
import { runMain } from '../helpers/process.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
const ENV = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID, CLIENT_SECRET }
const CACHED = { RATE_LIMITS: 'GET /v2/** 10/1h cache=1h' }

t.test('cacheBound: CACHE_MAX_BYTES, or CACHE_WATER of a smaller limit; CACHE_MAX_BYTES without a limit', async (t) => {
  const cases: Array<[number, number, number]> = [
    [0, 32 * MiB, 32 * MiB],
    [128 * MiB, 32 * MiB, Math.floor(0.2 * 128 * MiB)],
    [160 * MiB, 32 * MiB, 32 * MiB],
    [160 * MiB - 1, 32 * MiB, Math.floor(0.2 * (160 * MiB - 1))],
    [1024 * MiB, 32 * MiB, 32 * MiB],
    [128 * MiB, 16 * MiB, 16 * MiB]
  ]
  for (const [limit, max, bound] of cases) t.equal(cacheBound(limit, max), bound, `limit ${limit}, CACHE_MAX_BYTES ${max}`)
})

t.test('a full cache at its bound stays under the low water, beside an idle sidecar\'s live memory', async (t) => {
  // Idle live memory of the built sidecar in a 128 MiB cgroup, garbage included: 29 MiB (test/overload/cgroup-cache.test.ts, 2026-12-02).
  const idle = 29 * MiB
  const limit = 128 * MiB
  t.ok(idle + cacheBound(limit, DEFAULT_CACHE_MAX_BYTES) < LOW_WATER * limit, 'at rest: below the low water')
  t.equal(cacheBound(limit, DEFAULT_CACHE_MAX_BYTES), Math.floor(CACHE_WATER * limit))
})

t.test('check-config says when CACHE_MAX_BYTES does not fit, with the limit to set; not when it fits or no rule caches', async (t) => {
  const warnings = (env: Record<string, string>, limit: number): string[] => cacheBoundWarnings(loadConfig({ ...ENV, ...env }), limit)
  t.same(warnings(CACHED, 128 * MiB), [
    'CACHE_MAX_BYTES (33554432) does not fit in the memory limit (134217728 bytes) beside the rest of the sidecar: the read cache keeps at most ' +
    '26843545 bytes (20 % of the limit). Raise the limit to 167772160 bytes, or lower CACHE_MAX_BYTES'
  ])
  t.same(warnings(CACHED, 160 * MiB), [], 'fits')
  t.same(warnings(CACHED, 0), [], 'no limit known')
  t.same(warnings({ ...CACHED, CACHE_MAX_BYTES: String(16 * MiB), CACHE_ENTRY_MAX_BYTES: String(8 * MiB) }, 128 * MiB), [], 'a smaller CACHE_MAX_BYTES fits')
  t.same(warnings({ RATE_LIMITS: 'GET /v2/** 10/1h' }, 128 * MiB), [], 'no rule with cache=')

  const running = runMain(t, ['check-config'], { ...ENV, ...CACHED, MEMORY_LIMIT_BYTES: String(128 * MiB) })
  t.equal(await running.exited, 0, 'still valid')
  t.match(running.stderr(), /^store-auth-proxy: warning: CACHE_MAX_BYTES \(33554432\) does not fit in the memory limit \(134217728 bytes\)/m)
})

t.test('the bound in force is on /status and in the start log', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => { res.end('{}') })
  const { adminUrl, logs } = await startSidecar(t, upstream.url, { ...CACHED, MEMORY_LIMIT_BYTES: String(128 * MiB) })
  const status = await (await request(`${adminUrl}/status`)).body.json() as { cache: { maxBytes: number, configuredMaxBytes: number } }
  t.equal(status.cache.maxBytes, 26843545, 'in force')
  t.equal(status.cache.configuredMaxBytes, DEFAULT_CACHE_MAX_BYTES, 'CACHE_MAX_BYTES')
  const bound = logs.entries().find((l) => l.msg === 'read cache bound in memory')
  t.match(bound, { maxBytes: 26843545, configuredMaxBytes: DEFAULT_CACHE_MAX_BYTES, memoryLimitBytes: 128 * MiB })
  t.ok(logs.entries().some((l) => l.level === 40 && /^CACHE_MAX_BYTES \(33554432\) does not fit/.test(String(l.msg))), 'a warning')
})
