// /status lists the read cache's most recently used copies, not all: a full cache of small
// answers holds tens of thousands, and the whole list was one answer built in memory.
import t from 'tap'
import { cacheSidecar, startTi } from '../cache/fixture.js'
import { STATUS_ENTRIES } from '../../src/cache/read-cache.js'

interface Listed { path: string }

t.test('a cache holding more copies than /status lists: the count of all, the ones used last', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: {}, body: 'ok' }))
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: 'GET /v2/store/** 1000/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0' })
  const held = STATUS_ENTRIES + 20
  for (let i = 0; i < held; i++) t.match((await s.get(`/v2/store/${i}`)).headers['cache-status'], '; stored')
  // Used again: the oldest copy is now the most recently used.
  t.match((await s.get('/v2/store/0')).headers['cache-status'], '; hit')
  const cache = (await s.status()).cache as { count: number, entries: Listed[] }
  t.equal(cache.count, held, 'every copy counted')
  t.equal(cache.entries.length, STATUS_ENTRIES, `${STATUS_ENTRIES} listed`)
  t.equal(cache.entries[0]?.path, '/v2/store/0', 'the copy used last comes first')
  t.equal(cache.entries[1]?.path, `/v2/store/${held - 1}`, 'then the one stored last')
  t.notOk(cache.entries.some((e) => e.path === '/v2/store/1'), 'the least recently used are left out')
})
