// Schedules that broke the whole-path promise, one per features-meet case the model meets,
// replayed by the model's runner (run.ts: the same fleet, the same checks after every step),
// with nothing gated: each must hold. While its case is in KNOWN_OPEN (its fix not on main) the
// test is a `todo`: it runs and reports, but does not fail. A replay fails only where its defect
// is; on a busy machine a race or a window may be missed and an open case pass by luck.
import t, { type Test } from 'tap'
import { CASES, KNOWN_OPEN } from './known-open.js'
import { runSchedule } from './run.js'
import type { Caller, Command } from './schedule.js'

t.setTimeout(120_000)
// Each schedule mostly waits (windows, timeouts) on a fleet, a redis-server and ports of its own: three at a time.
t.jobs = 3

async function holds (t: Test, caseId: string, size: number, schedule: Command[]): Promise<void> {
  const report = await runSchedule(size, schedule, 'cx', { gate: new Set() })
  const v = report.violation
  const todo = KNOWN_OPEN.has(caseId) ? `${caseId} is open: ${CASES[caseId] ?? ''}` : undefined
  t.equal(v, undefined, v === undefined ? 'the promise held' : `${v.check}${v.case === undefined ? '' : ` (${v.case})`}: ${v.message}`,
    { trace: report.trace.join('\n'), ...(todo === undefined ? {} : { todo }) })
}

const together = (n: number, s: (i: number) => number): Caller[] => Array.from({ length: n }, (_, i) => ({ s: s(i), delayMs: 0 }))

t.test('case-1: a cold fleet of three asks for the catalog at once; none is told the budget is spent', async (t) => {
  // Shrunk from the model: three callers, one per sidecar, at the same moment; two sidecars
  // fetch (both misses raced the marker) and spend the catalog's 2 points, the third meets
  // the spent budget while both fetches are at TI. Three per sidecar: the race is met on a busy machine too.
  await holds(t, 'case-1', 3, [{ op: 'burst', path: 'p1', callers: together(9, (i) => i % 3) }])
})

for (const policy of ['volatile-lru', 'allkeys-lru'] as const) {
  t.test(`case-2: entries written to an evicting Redis (${policy}) push out the catalog's tally`, async (t) => {
    // Before the tally lost its TTLs, under volatile-lru (the managed offerings' default) the
    // sliding log was the least recently touched key: the next misses spent points Redis
    // forgot, 3 at TI under 2/4s. volatile-* now evicts only the cache's entries; allkeys-*
    // may still take the tally (a documented limit, reported at connect).
    await holds(t, policy === 'allkeys-lru' ? 'case-2-allkeys' : 'case-2', 2, [
      { op: 'burst', path: 'p1', callers: [{ s: 0, delayMs: 0 }] },
      { op: 'evict', policy },
      { op: 'burst', path: 'p2', callers: [{ s: 1, delayMs: 0 }] },
      { op: 'burst', path: 'p3', callers: [{ s: 0, delayMs: 0 }] }
    ])
  })
}

t.test('assumption-3: Redis loses its data, a sidecar that spent is cut off right after, a rollout', async (t) => {
  // Shrunk from the model (seed 935865010, group 2), after the held sizes: A spends the
  // catalog's point, Redis is emptied, A is cut off before it hears of it, B is replaced by a
  // pod declaring 3. A spends its share alone; the newcomer knows no size but its own and holds
  // A's unknown entry at ⌊2/3⌋ = 0: 3 at TI under 2/4s. Outside the third assumption (a loss
  // while a sidecar that spent is cut off for over 3 s), documented: a todo that reports.
  await holds(t, 'assumption-3', 2, [
    { op: 'burst', path: 'p1', callers: [{ s: 0, delayMs: 0 }, { s: 1, delayMs: 2 }] },
    { op: 'flush' },
    { op: 'partition', s: 0, how: 'cut' },
    { op: 'rollout', s: 1 },
    { op: 'wait', ms: 5000 },
    { op: 'burst', path: 'p1', callers: [{ s: 1, delayMs: 135 }, { s: 0, delayMs: 191 }] },
    { op: 'burst', path: 'p2', callers: [{ s: 0, delayMs: 298 }, { s: 0, delayMs: 248 }, { s: 1, delayMs: 193 }] }
  ])
})

for (const how of ['restart', 'replace'] as const) {
  t.test(`case-3: a sidecar cut off spends its share, is ${how === 'restart' ? 'restarted' : 'replaced'}, and the share is not spent twice`, async (t) => {
    // Orders 3/4s, fleet of 3 (share 1): A, cut off, waits out a window and sends its one; A
    // is restarted (its STATE_DIR kept) or replaced (a new pod: an empty one) before Redis
    // hears of it; healed, B and C must not send 3 more within the window: 4 within 4 s.
    await holds(t, how === 'restart' ? 'case-3' : 'case-3-replace', 3, [
      { op: 'partition', s: 0, how: 'cut' },
      { op: 'wait', ms: 5000 },
      { op: 'burst', path: 'orders', callers: together(2, () => 0) },
      { op: how, s: 0 },
      { op: 'heal' },
      { op: 'settle' },
      { op: 'burst', path: 'orders', callers: together(4, (i) => 1 + (i % 2)) }
    ])
  })
}

t.test('case-3: a rollout of another sidecar while one is cut off does not free the cut-off one\'s share', async (t) => {
  // From an outside review: sidecar 1's new pod took the place of sidecar 0 (cut off); sidecar
  // 0's own replacement then held nothing back: 4 at TI within 3.9 s under 3/4s.
  await holds(t, 'case-3-replace', 3, [
    { op: 'partition', s: 0, how: 'cut' },
    { op: 'wait', ms: 1500 },
    { op: 'replace', s: 1 },
    { op: 'wait', ms: 4000 },
    { op: 'burst', path: 'orders', callers: together(2, () => 0) },
    { op: 'replace', s: 0 },
    { op: 'heal' },
    { op: 'settle' },
    { op: 'burst', path: 'orders', callers: together(4, (i) => 1 + (i % 2)) }
  ])
})

t.test('case-3: a fleet of one replaced right after it was cut off does not spend its budget twice', async (t) => {
  // From an outside review: a fleet of one spends its whole budget alone at once when cut off;
  // its replacement, arriving within a window of the lapse, held nothing back: 6 under 3/4s.
  await holds(t, 'case-3-replace', 1, [
    { op: 'wait', ms: 4500 },
    { op: 'partition', s: 0, how: 'cut' },
    { op: 'wait', ms: 300 },
    { op: 'burst', path: 'orders', callers: together(3, () => 0) },
    { op: 'replace', s: 0 },
    { op: 'heal' },
    { op: 'settle' },
    { op: 'burst', path: 'orders', callers: together(3, () => 0) }
  ])
})

t.test('case-3-rollout: a sidecar cut off spends its share while another is rolled out declaring a larger fleet', async (t) => {
  // From an outside review: orders 3/4s, fleet of 3 declaring 3; sidecar 1's new pod declares
  // 4 and held ⌊3/4⌋ = 0 for sidecar 0, cut off and spending its ⌊3/3⌋ = 1: 4 within 4 s.
  await holds(t, 'case-3-rollout', 3, [
    { op: 'partition', s: 0, how: 'cut' },
    { op: 'rollout', s: 1 },
    { op: 'wait', ms: 5000 },
    { op: 'burst', path: 'orders', callers: together(2, () => 0) },
    { op: 'burst', path: 'orders', callers: together(3, () => 1) }
  ])
})

t.test('case-3-rollout: Redis loses its data mid-rollout while a sidecar of the old size is cut off', async (t) => {
  // From an outside review: orders 3/4s; sidecar 0 (declared 3) cut off; 1 and 2 rolled out
  // declaring 4; then a FLUSHALL. The records went with the data: those back held the unknown
  // entries at their own ⌊3/4⌋ = 0 while sidecar 0 spent its ⌊3/3⌋ = 1: 4 within 4 s.
  await holds(t, 'case-3-rollout', 3, [
    { op: 'partition', s: 0, how: 'cut' },
    { op: 'rollout', s: 1 },
    { op: 'rollout', s: 2 },
    { op: 'wait', ms: 1000 },
    { op: 'flush' },
    { op: 'wait', ms: 5500 },
    { op: 'burst', path: 'orders', callers: together(2, () => 0) },
    { op: 'burst', path: 'orders', callers: together(4, (i) => 1 + (i % 2)) }
  ])
})

t.test('case-4: the token lapsed with the OAuth API down; the stored catalog is served anyway', async (t) => {
  await holds(t, 'case-4', 2, [
    { op: 'burst', path: 'p1', callers: [{ s: 0, delayMs: 0 }] },
    { op: 'tokenLapse' },
    { op: 'burst', path: 'p1', callers: [{ s: 0, delayMs: 0 }] }
  ])
})

t.test('case-5: TI hangs; six waiters of one fetch each get a status line in time', async (t) => {
  // A product (10/2s, cache=1s): each waiter of the failed fetch fetched again in turn, the
  // fourth was cut off at IDLE_TIMEOUT_MS with no status line.
  await holds(t, 'case-5', 2, [
    { op: 'tiSlow', ms: 1500 },
    { op: 'burst', path: 'item', callers: together(6, () => 0) }
  ])
})

t.test('case-6: three sidecars find one stale product; one refresh reaches TI', async (t) => {
  // A product (10/2s, cache=1s stale=3s) stored through A; stale a second later; a caller on
  // each sidecar at once: each refreshes it, spending a point each.
  await holds(t, 'case-6', 3, [
    { op: 'burst', path: 'item', callers: [{ s: 0, delayMs: 0 }] },
    { op: 'wait', ms: 1200 },
    { op: 'burst', path: 'item', callers: together(3, (i) => i) }
  ])
})

t.test('case-7: an entry in another layout (a rolling update) is a miss, not a 500', async (t) => {
  // A stores the catalog in Redis; the entry is rewritten as another version would write it;
  // B, which has no copy of its own, reads it.
  await holds(t, 'case-7', 2, [
    { op: 'burst', path: 'p1', callers: [{ s: 0, delayMs: 0 }] },
    { op: 'foreign' },
    { op: 'burst', path: 'p1', callers: [{ s: 1, delayMs: 0 }] }
  ])
})
