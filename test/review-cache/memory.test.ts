// Review of the read cache: whether CACHE_MAX_BYTES bounds what its copies really hold. Regression
// tests failed on the code reviewed (each defect fixed since); PROBE tests passed on it.
import t from 'tap'
import { cacheSidecar, startTi } from '../cache/fixture.js'

const MAX = 64 * 1024

interface Listed { path: string, bytes: number }

t.test('Regression: an entry\'s path (kept for /status) and its Vary values are not counted: 40 small entries hold several times CACHE_MAX_BYTES', async (t) => {
  const ti = await startTi(t)
  ti.answer(() => ({ status: 200, headers: { vary: 'X-Pad' }, body: 'ok' }))
  const s = await cacheSidecar(t, ti, { RATE_LIMITS: 'GET /v2/store/** 1000/1h cache=1h', RATE_LIMIT_MAX_WAIT_MS: '0', CACHE_MAX_BYTES: String(MAX), CACHE_ENTRY_MAX_BYTES: '1024' })
  const pad = 'p'.repeat(6_000)
  for (let i = 0; i < 40; i++) {
    const answer = await s.get(`/v2/store/${i}/${'x'.repeat(6_000)}`, { 'x-pad': `${i}${pad}` })
    t.match(answer.headers['cache-status'], '; stored', `entry ${i} stored`)
  }
  const cache = (await s.status()).cache as { bytes: number, entries: Listed[] }
  // Vary'd values are kept as digests (22 bytes), never whole.
  const held = cache.entries.reduce((sum, e) => sum + e.path.length + 22, 0)
  t.ok(cache.bytes <= MAX, `counted: ${cache.bytes} bytes`)
  t.ok(held <= MAX, `held: ${cache.entries.length} entries whose paths and Vary values alone are ${held} bytes, CACHE_MAX_BYTES ${MAX}`)
})
