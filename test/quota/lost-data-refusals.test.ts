// What a refusal says while Redis answers without its data (its epoch gone: flushed, restarted
// empty, or evicted under an allkeys-* policy): the sidecar tells Redis its ledger again, and
// every budgeted request until that is done is refused as "new or lost its data", whether a
// take or the heartbeat met the loss; never as "not answering", which is a silent Redis's. The
// real guard over the real fleet store on the scripted Redis, its reassertion held open.
import pino from 'pino'
import t, { type Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { createQuotaGuard, type Caller } from '../../src/quota/guard.js'
import { gate, scriptedFleet, TIMING } from './fleet-double.js'
import { guardConfig } from './guard-config.js'

const LOST = /rate-limit redis is new or lost its data/
const SILENT = /rate-limit redis not answering/
const STAYING: Caller = { destroyed: false, once: () => undefined, removeListener: () => undefined }

async function guarded (t: Test) {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  const guard = createQuotaGuard({ config: guardConfig('GET /a 4/1s', { maxWaitMs: 0 }), clock: f.c.clock, log: pino({ level: 'silent' }), metrics: createMetrics({ defaultMetrics: false }), fleet: () => f.store })
  /** 'ok', or what the refusal says. */
  const ask = async (): Promise<string> => {
    const verdict = await guard.admit(f.rule, STAYING)
    if (verdict.ok) guard.leaving(verdict.ticket)
    return verdict.ok ? 'ok' : verdict.reason === 'gone' ? 'gone' : guard.describe(verdict).message
  }
  /** The next reassertion answers only once `open()` is called. */
  const holdReassertion = () => {
    const held = gate()
    f.double.script.hold.reassert = held.promise
    return () => {
      f.double.script.hold.reassert = undefined
      held.open()
    }
  }
  return { f, ask, holdReassertion }
}

t.test('met by a take: that refusal and those while Redis is told the ledger say it lost its data', async (t) => {
  const { f, ask, holdReassertion } = await guarded(t)
  t.equal(await ask(), 'ok', 'shared')
  const open = holdReassertion()
  f.double.script.take = () => ({ code: 'epoch' })
  t.match(await ask(), LOST, 'the take that met it')
  t.match(await ask(), LOST, 'the next, the reassertion under way')
  open()
  await f.c.tick(0)
  t.equal(f.store.status().state, 'shared', 'shared again once told')
})

t.test('met by the heartbeat: refusals while Redis is told the ledger say it lost its data', async (t) => {
  const { f, ask, holdReassertion } = await guarded(t)
  t.equal(await ask(), 'ok', 'shared')
  const before = f.double.count('reassert')
  const open = holdReassertion()
  f.double.script.heartbeat = () => ({ code: 'epoch' })
  await f.c.tick(TIMING.heartbeatMs)
  t.equal(f.double.count('reassert'), before + 1, 'the reassertion under way')
  t.match(await ask(), LOST)
  open()
})

t.test('once told, a later reassertion (Redis back from silence) refuses as not answering, not as lost data', async (t) => {
  const { f, ask, holdReassertion } = await guarded(t)
  f.double.script.take = () => ({ code: 'epoch' })
  t.match(await ask(), LOST)
  await f.c.tick(0)
  f.double.script.take = () => ({ code: 'ok' })
  t.equal(f.store.status().state, 'shared', 'told: shared again')
  const closed = new Error('Connection is closed.')
  f.double.script.down = closed
  f.double.emit(false, closed)
  t.equal(f.store.status().state, 'degraded', 'cut off')
  f.double.script.down = undefined
  const open = holdReassertion()
  f.double.emit(true)
  t.match(await ask(), SILENT, 'Redis answers again, the ledger being told: as any reassertion')
  open()
})
