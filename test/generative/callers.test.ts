// Callers that give up at random points: mid-upload, while the upstream thinks, or
// mid-answer. Nothing may be sent upstream whole for a caller gone before its
// request was, nothing twice; the metrics count the request as aborted with the
// status line actually sent (or none); no ERROR line, no stack, for ordinary client
// behaviour.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { call, type Abort } from '../helpers/caller.js'
import { eventually } from '../helpers/eventually.js'
import type { Answer } from '../helpers/recording-upstream.js'
import { bodyOf, BODY_METHODS, bodyArb, METHODS, requestCaseArb, toCallerRequest, type BodySpec } from './arbitraries.js'
import { checkProperty, createLabels, fileBudget, describe, nextId, setup, statusClass, type Setup } from './harness.js'

fileBudget(t)

/**
 * What the sidecar and the upstream made of a request, once final: the sidecar has
 * counted it and holds nothing in flight, and every copy the upstream got is over.
 */
async function final (t: Test, s: Setup, id: string): Promise<void> {
  assert.ok(await s.settled(t), 'the sidecar counted the request')
  assert.ok(await eventually(t, `the upstream's record of ${id} is final`, () => s.upstream.over(id)), `the upstream's record of ${id} is final`)
}

t.test('callers that give up', async (t) => {
  const s = await setup(t, { UPSTREAM_TIMEOUT_MS: '5000' })
  await s.baseline()

  await t.test('mid-upload: the upstream never gets the request whole', async (t) => {
    const labels = createLabels()
    await checkProperty(t, 'abort mid-upload', fc.asyncProperty(
      requestCaseArb({ methods: BODY_METHODS, body: bodyArb.filter((b) => bodyOf(b).length > 1) }),
      fc.integer({ min: 0, max: 999 }),
      async (c, perMille) => {
        const id = nextId('a')
        const size = bodyOf(c.body).length
        const abort: Abort = { at: 'midBody', afterBytes: Math.min(size - 1, Math.floor(size * perMille / 1000)) }
        const result = await call(s.proxyUrl, toCallerRequest({ ...c, expectContinue: false }, id, abort))
        s.expect.request(c.method, statusClass(result.status), 'aborted')
        await final(t, s, id)
        assert.equal(result.aborted, true, `the caller gave up before it finished sending (${describe(result)})`)
        assert.equal(result.connected, true, 'the caller gave up after connecting')
        const seen = s.upstream.seen(id)
        if (seen.length > 0) labels.add('part of the upload reached the upstream')
        assert.ok(seen.length <= 1, 'sent at most once')
        assert.ok(seen.every((r) => !r.complete), `the upstream never got the whole request (it got ${seen[0]?.body().length ?? 0} of ${size} bytes)`)
      }
    ), { numRuns: 25, timeLimitMs: 12_000, atLeast: { labels, counts: { 'part of the upload reached the upstream': 5 } } })
  })

  await t.test('while waiting for the answer: sent at most once, counted as aborted with no status', async (t) => {
    const labels = createLabels()
    await checkProperty(t, 'abort while waiting', fc.asyncProperty(
      requestCaseArb({ methods: METHODS, body: fc.constant<BodySpec>({ bytes: [1, 2] }) }),
      fc.integer({ min: 10, max: 300 }),
      async (c, afterMs) => {
        const id = nextId('w')
        s.upstream.plan(id, { kind: 'stall' })
        const result = await call(s.proxyUrl, toCallerRequest(c, id, { at: 'waiting', afterMs }))
        s.expect.request(c.method, 'none', 'aborted')
        await final(t, s, id)
        assert.equal(result.status, undefined, describe(result))
        assert.equal(result.connected, true, 'the caller gave up after connecting')
        const sent = s.upstream.seen(id).length
        if (sent === 1) labels.add('sent before the caller gave up')
        assert.ok(sent <= 1, 'sent at most once')
      }
    ), { numRuns: 10, timeLimitMs: 6_000, atLeast: { labels, counts: { 'sent before the caller gave up': 5 } } })
  })

  await t.test('mid-answer: counted as aborted with the status sent', async (t) => {
    await checkProperty(t, 'abort mid-answer', fc.asyncProperty(
      requestCaseArb({ methods: ['GET', 'POST', 'PUT'], body: fc.constant<BodySpec>({ bytes: [3] }) }),
      fc.constantFrom(200, 201, 404, 500),
      async (c, status) => {
        const id = nextId('r')
        // Far more than the socket buffers hold, so the answer cannot have ended when the caller goes.
        const answer: Answer = { status, headers: [['Content-Type', 'application/octet-stream']], body: Buffer.alloc(16 * 1024 * 1024, 0x62), framing: 'length' }
        s.upstream.plan(id, { kind: 'answer', answer })
        const result = await call(s.proxyUrl, toCallerRequest(c, id, { at: 'midAnswer' }))
        s.expect.request(c.method, statusClass(result.status), 'aborted')
        await final(t, s, id)
        assert.equal(result.status, status, describe(result))
        assert.equal(s.upstream.seen(id).length, 1, 'sent once')
      }
    ), { numRuns: 6, timeLimitMs: 6_000 })
  })

  await t.test('metrics agree with what the callers saw', async (t) => { await s.checkMetrics(t) })
  await t.test('logs', async (t) => { s.checkLogs(t) })
})
