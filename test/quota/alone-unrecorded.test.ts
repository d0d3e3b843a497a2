// A send decided alone (cut off from Redis) that STATE_DIR's ledger cannot record is given back
// and refused: only the file would hold it, and a restart's lapse in Redis ends when the file is
// told (redis-scripts.ts). A shared send goes out all the same: Redis holds it.
import t from 'tap'
import { persistingStore } from '../../src/quota/ledger-file.js'
import type { Store, Take } from '../../src/quota/store.js'
import { captureLogs } from '../helpers/logs.js'

const LIMITS = [{ count: 5, windowMs: 1_000, text: '5/1s' }]

for (const [name, answer, refunded] of [
  ['decided alone: refunded, refused', { kind: 'ok', id: 's1', alone: true }, ['s1']],
  ['shared: sent (Redis holds it)', { kind: 'ok', id: 's2' }, []]
] as Array<[string, Take, string[]]>) {
  t.test(name, async (t) => {
    const refunds: string[] = []
    const base: Store = { take: () => answer, refund: (_scope, _limits, id) => { refunds.push(id) }, leaving: () => undefined, coolDown: () => 0 }
    const logs = captureLogs('debug')
    const store = persistingStore(base, async () => { throw Object.assign(new Error('no space'), { code: 'ENOSPC' }) }, logs.log)
    const take = await store.take('GET /a', LIMITS)
    t.same(take, refunded.length > 0 ? { kind: 'degraded', ms: 1_000, unrecorded: true } : answer)
    t.same(refunds, refunded)
    t.match(logs.entries().at(-1), { level: 50, reason: 'ENOSPC' })
  })
}
