// The read cache drops the copies past their lifetime every PURGE_MS by itself, whether
// requests look them up or not: a shedding sidecar looks none up. An outside review found
// lapsed copies kept for as long as the sidecar shed.
import t from 'tap'
import { cacheKey } from '../../src/cache/policy.js'
import { createReadCache, PURGE_MS } from '../../src/cache/read-cache.js'
import { createMetrics } from '../../src/metrics.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

t.test('copies are dropped at their lifetime\'s end with no request, PURGE_MS apart at the closest; none after close', async (t) => {
  const { clock, tick } = fakeClock()
  const cache = createReadCache({ clock, log: captureLogs().log, metrics: createMetrics({ defaultMetrics: false }), maxBytes: 1024 * 1024, entryMaxBytes: 1024, fillMs: 1000 })
  const paths = (): string[] => cache.status().entries.map((e) => e.path).sort()
  const store = (path: string, freshMs: number, staleMs = 0): void => {
    const decision = { store: true as const, freshMs, staleMs, initialAgeMs: 0, vary: [] }
    cache.store(cacheKey('https://ti.example', path, {}), 'GET /v2/**', decision, { statusCode: 200, headers: {}, body: Buffer.from('{}') })
  }
  store('/before-start', 500)
  await cache.start()
  store('/short', 1000, 500)
  store('/long', 2 * PURGE_MS + 1)
  await tick(499)
  t.same(paths(), ['/before-start', '/long', '/short'])
  await tick(1)
  t.same(paths(), ['/long', '/short'], 'at its end: dropped with no request, stored before start() or not')
  await tick(1000)
  t.same(paths(), ['/long', '/short'], 'past stale=, but within PURGE_MS of the last purge: kept for now')
  await tick(PURGE_MS - 1000)
  t.same(paths(), ['/long'], 'PURGE_MS after the last purge')
  store('/soon', 10)
  await tick(PURGE_MS - 1)
  t.same(paths(), ['/long', '/soon'])
  await tick(1)
  t.same(paths(), [], 'both lapsed by the next purge')
  store('/again', 10)
  await cache.close()
  await tick(2 * PURGE_MS)
  t.same(paths(), ['/again'], 'closed: no purge any more')
})
