// A send is written to STATE_DIR before it leaves (it goes out only once recorded), and it
// counts from when it leaves, which may be a while later (a connection, a connect): nothing
// writes the file between that and a crash. A restart must never count it from earlier than
// it reached TI, embedded or told to Redis (a vouched restart ends its lapse on that word).
import pino from 'pino'
import t from 'tap'
import { parseRules, type Rule } from '../../src/config/rate-limit-rules.js'
import { createLedger, PENDING_HOLD_MS } from '../../src/quota/ledger.js'
import { createLedgerWriter, persistingStore, readLedgerFile, restoreLedger } from '../../src/quota/ledger-file.js'
import { createCooldowns, createLocalStore } from '../../src/quota/store.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { tempDir } from '../helpers/temp-dir.js'

const [one, two] = parseRules('GET /x 1/2m\nGET /y 2/2m', 'RATE_LIMITS').rules as [Rule, Rule]
const W = 120_000

/** A sidecar's run over `dir`: its ledger, written before each send leaves, as in the guard. */
function run (dir: string, c: ReturnType<typeof fakeClock>, { id: scope, limits } = one) {
  const ledger = createLedger(c.clock)
  const restored = restoreLedger(ledger, readLedgerFile(dir), [one, two], c.clock, () => 2)
  const store = persistingStore(createLocalStore(c.clock, createCooldowns(c.clock), ledger), createLedgerWriter(dir, 'm', ledger, c.clock).save, pino({ level: 'silent' }))
  /** Admits and records one send, and lets it leave `waitMs` later; when it left. */
  async function send (waitMs: number): Promise<number> {
    const taken = await store.take(scope, limits)
    if (taken.kind !== 'ok') throw new Error(`not admitted: ${taken.kind}`)
    await c.tick(waitMs)
    if (store.leaving(scope, limits, taken.id) !== undefined) throw new Error('refused as it left')
    return c.clock.now()
  }
  return { ledger, restored, send }
}

for (const [name, waitMs, downMs] of [
  ['a restart soon after', 2_000, 500],
  ['a restart past the hold', 2_000, PENDING_HOLD_MS + 10_000],
  ['a send that waited most of its hold', PENDING_HOLD_MS - 1, 1_000]
] as Array<[string, number, number]>) {
  t.test(`a send that waited, left, then a crash before any write: ${name}`, async (t) => {
    const c = fakeClock()
    const dir = tempDir('ledger-waiting-')
    const left = await run(dir, c).send(waitMs)
    await c.tick(downMs)
    const next = run(dir, c)
    t.equal(next.restored, 1)
    const room = next.ledger.wait(one.id, one.limits)
    t.ok(room >= left + W - c.clock.now(), `no room before ${left + W - c.clock.now()} ms: ${room}`)
  })
}

t.test('a send written again after it left counts from its departure, not later', async (t) => {
  const c = fakeClock()
  const dir = tempDir('ledger-waiting-')
  const first = run(dir, c, two)
  const left = await first.send(2_000)
  await first.send(0)
  await c.tick(1_000)
  const next = run(dir, c, two)
  t.same(next.ledger.open().map((s) => s.ageMs).sort((a, b) => b - a), [c.clock.now() - left, 0])
})
