// The models excuse a late Redis command only for a stall the witness saw (test/helpers/stalls.ts):
// it must see a blocked event loop, count it once, and excuse no fall back of another kind.
// The kernel's softirq threads are left out: on a busy machine they wait whatever the test does.
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { fallbackByMachine, lateByMachine, redisLateByMachine, watchStalls } from '../helpers/stalls.js'

const TIMING = { timeoutMs: 100, heartbeatMs: 200 }

/** Keeps this event loop busy for `ms` (a loaded machine, seen from the sidecars in it). */
function block (ms: number): void {
  for (const until = performance.now() + ms; performance.now() < until;) { /* busy */ }
}

t.test('a blocked event loop is seen, within the window it blocked', async (t) => {
  const witness = watchStalls(() => [], { softirq: false })
  t.teardown(witness.stop)
  await sleep(50)
  const from = performance.now()
  block(150)
  const to = performance.now()
  // The timer's next tick reads it.
  await sleep(30)
  const taken = witness.takenMs(from, to)
  t.ok(taken >= 130, `the witness saw ${Math.round(taken)} ms of a 150 ms block`)
  t.ok(taken <= to - from + 20, `and counted it once (${Math.round(taken)} ms)`)
  t.ok(fallbackByMachine(witness, { at: to, reason: 'Command timed out' }, TIMING).excused, 'a timeout ending then is the machine\'s')
  t.ok(redisLateByMachine(witness, from, to, TIMING.timeoutMs), 'a command sent then was made late by the machine')
  t.ok(lateByMachine(witness, { startedAt: from, doneAt: to + 30 }, 60).excused, 'so is a call late by less than the block')
  t.notOk(lateByMachine(witness, { startedAt: from, doneAt: to + 30 }, 0).excused, 'not one late by more')
})

t.test('a fall back for no stall is never the machine\'s', async (t) => {
  const witness = watchStalls(() => [], { softirq: false })
  t.teardown(witness.stop)
  block(150)
  const at = performance.now()
  await sleep(30)
  for (const reason of ['Connection is closed.', 'NOAUTH Authentication required.', 'the connection closed']) {
    t.notOk(fallbackByMachine(witness, { at, reason }, TIMING).excused, reason)
  }
  // The same timeout long after the block: nothing taken in its own window.
  t.notOk(fallbackByMachine(witness, { at: at - 1000, reason: 'Command timed out' }, TIMING).excused, 'a timeout a second before the block')
})
