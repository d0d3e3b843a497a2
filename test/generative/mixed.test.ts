// A mix: a few concurrent callers, each with its own request, its own upstream
// behaviour (normal, early answer, cut, reset, stall, interim answers, invalid
// bytes, 401) and maybe its own impatience. Only the invariants that hold whatever
// happens are asserted: every caller gets a status line or sees its own abort;
// nothing is sent twice (a 401 replay once, with another token); the metrics count
// exactly what the callers saw; no secret in the logs.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { call } from '../helpers/caller.js'
import { eventually } from '../helpers/eventually.js'
import type { Behaviour } from '../helpers/recording-upstream.js'
import { answerCaseArb, bodyArb, requestCaseArb, toAnswer, toCallerRequest } from './arbitraries.js'
import { checkProperty, createLabels, describe, fileBudget, nextId, ownError, setup, statusClass } from './harness.js'

const UPSTREAM_TIMEOUT_MS = 1000

const behaviourArb: fc.Arbitrary<Behaviour> = fc.oneof(
  answerCaseArb.map((a): Behaviour => ({ kind: 'answer', answer: toAnswer(a) })),
  answerCaseArb.map((a): Behaviour => ({ kind: 'early', answer: { ...toAnswer(a), status: 413, framing: 'length' }, then: 'close' })),
  // At least one body byte: a head then nothing has its own property (misbehaving-upstream.test.ts).
  fc.record({ framing: fc.constantFrom('length', 'chunked', 'close'), sendBytes: fc.integer({ min: 1, max: 100_000 }), how: fc.constantFrom('fin', 'reset') })
    .map((c): Behaviour => ({ kind: 'cut', ...c } as Behaviour)),
  fc.constant<Behaviour>({ kind: 'reset' }),
  fc.constant<Behaviour>({ kind: 'stall' }),
  fc.tuple(fc.integer({ min: 1, max: 2 }), answerCaseArb).map(([count, a]): Behaviour => ({ kind: 'interim', code: 103, count, everyMs: 50, final: toAnswer(a) })),
  fc.constant<Behaviour>({ kind: 'invalid', bytes: Buffer.from('HTTP/1.1 200 OK\r\nBad Header: x\r\nContent-Length: 2\r\n\r\nok') }),
  answerCaseArb.map((a): Behaviour => ({ kind: 'unauthorized', answer: toAnswer(a) }))
)

// No HEAD: the metrics check reads the sidecar's error code from the answer body.
const callerArb = fc.record({
  request: requestCaseArb({ methods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'], body: bodyArb }),
  behaviour: behaviourArb,
  // Only a caller whose upstream stalls gives up: its answer cannot have started, so its count is certain.
  givesUpAfterMs: fc.option(fc.integer({ min: 10, max: 500 }))
})

fileBudget(t)

t.test('a mix of callers and upstream behaviours, concurrently', async (t) => {
  const s = await setup(t, { UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS), IDLE_TIMEOUT_MS: '5000', UPSTREAM_QUEUE_TIMEOUT_MS: '500' })
  await s.baseline()

  await t.test('every caller gets a status line or sees its own abort; nothing is sent twice', async (t) => {
    const labels = createLabels()
    await checkProperty(t, 'mixed', fc.asyncProperty(fc.array(callerArb, { minLength: 1, maxLength: 6 }), async (callers) => {
      const ids = callers.map(() => nextId('mix'))
      callers.forEach((c, i) => { s.upstream.plan(ids[i] ?? '', c.behaviour) })
      const results = await Promise.all(callers.map((c, i) => {
        const abort = c.behaviour.kind === 'stall' && c.givesUpAfterMs !== null ? { at: 'waiting' as const, afterMs: c.givesUpAfterMs } : null
        return call(s.proxyUrl, toCallerRequest(c.request, ids[i] ?? '', abort), { timeoutMs: 10_000 })
      }))
      results.forEach((r, i) => {
        const method = callers[i]?.request.method ?? ''
        const code = ownError(r)?.error
        if (r.status !== undefined && code !== undefined) s.expect.error(code)
        s.expect.request(method, statusClass(r.status), r.aborted ? 'aborted' : r.complete ? 'completed' : 'truncated')
      })
      // Judged once final: the sidecar has counted every caller and the upstream's record is over.
      assert.ok(await s.settled(t), 'the sidecar counted every caller')
      assert.ok(await eventually(t, 'the upstream\'s records are final', () => ids.every((id) => s.upstream.over(id))), 'the upstream\'s records are final')
      results.forEach((r, i) => {
        const c = callers[i]
        const seen = s.upstream.seen(ids[i] ?? '')
        assert.ok(r.status !== undefined || r.aborted, `caller ${i} (${c?.behaviour.kind}) gets a status line or gave up itself (${describe(r)})`)
        const allowed = c?.behaviour.kind === 'unauthorized' ? 2 : 1
        assert.ok(seen.length <= allowed, `caller ${i} (${c?.behaviour.kind}) sent at most ${allowed} time(s), not ${seen.length}`)
        // A caller that stayed, and did not get an answer the sidecar made itself before
        // sending (every connection busy, a body too large), was sent upstream.
        const refusedUnsent = ['UPSTREAM_BUSY', 'BODY_TOO_LARGE', 'TOKEN_UNAVAILABLE', 'BAD_REQUEST'].includes(ownError(r)?.error ?? '')
        if (!r.aborted && !refusedUnsent) {
          assert.ok(seen.length >= 1, `caller ${i} (${c?.behaviour.kind}) stayed and was sent upstream (${describe(r)})`)
          labels.add('a caller stayed and was sent')
        }
        if (r.aborted && r.connected) labels.add('a caller gave up after connecting')
        if (seen.length === 2) labels.add('a 401 replayed')
        if (seen.length === 2) {
          const tokens = seen.map((x) => x.rawHeaders[x.rawHeaders.findIndex((h) => h.toLowerCase() === 'authorization') + 1])
          assert.notEqual(tokens[0], tokens[1], 'a replay carries another token')
        }
      })
    }), { numRuns: 40, timeLimitMs: 15_000, atLeast: { labels, counts: { 'a caller stayed and was sent': 40, 'a caller gave up after connecting': 3, 'a 401 replayed': 1 } } })
  })

  // Found by a random-seed run (seed 1795455542, 200 runs): a caller whose multi-MiB
  // upload is backpressured by a stalled upstream is not seen to leave (Node reads no
  // further from its socket, so its FIN waits unread), and the sidecar counts the 504 it
  // later writes as completed (README, Generative tests); an answer that races a caller's
  // close can likewise be complete on one side only. The exact status class and outcome
  // are checked by the single-behaviour files; here, that every request counts once.
  await t.test('metrics count every request once', async (t) => { await s.checkMetricTotals(t) })
  await t.test('logs', async (t) => { s.checkLogs(t) })
})
