// Saturation: every upstream connection held by a stalled upstream, more callers
// queued behind them, some of which give up. Every caller that stays gets a status
// line (504 for those on a connection, 503 UPSTREAM_BUSY with Retry-After for those
// that waited too long, or 504 if they got a connection in time); a caller answered
// 503 or gone while queued is never sent upstream, even once connections free up.
// Callers that give up are checked on a sidecar whose connections the test frees only
// once the sidecar has counted every one of them: freed by the upstream's timeout on a
// slow machine, a connection could come free as a caller leaves, and a request sent
// before its caller's leaving could be read would be rightly sent.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t, { type Test } from 'tap'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { call, headerMap, type CallerRequest, type CallerResult } from '../helpers/caller.js'
import { eventually } from '../helpers/eventually.js'
import { scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { checkProperty, fileBudget, describe, nextId, ownError, setup, statusClass } from './harness.js'

const UPSTREAM_TIMEOUT_MS = 1500

const get = (id: string, abortAfterMs: number | null): CallerRequest => ({
  method: 'GET',
  target: `/v2/store/orders/${id}`,
  headers: [['X-Gen-Id', id]],
  body: Buffer.alloc(0),
  framing: 'none',
  cuts: [],
  expectContinue: false,
  abort: abortAfterMs === null ? null : { at: 'waiting', afterMs: abortAfterMs }
})

fileBudget(t)

/**
 * How the held connections come free: the upstream's timeout (each held request answered 504), or
 * the test, once the sidecar has counted every queued caller (the upstream drops them: 502).
 */
type Freed = 'timeout' | 'release'

async function saturation (t: Test, freed: Freed, property: (saturate: (t: Test, queued: Array<number | null>) => Promise<void>) => Promise<void>): Promise<void> {
  // Freed by the test, the held requests outlive any wait for the sidecar's count.
  const timeoutMs = freed === 'timeout' ? UPSTREAM_TIMEOUT_MS : 30_000
  const s = await setup(t, { UPSTREAM_TIMEOUT_MS: String(timeoutMs), IDLE_TIMEOUT_MS: String(timeoutMs + 1000), UPSTREAM_QUEUE_TIMEOUT_MS: '300', TOKEN_WAIT_MS: '500' })
  await s.baseline()

  const tally = (r: CallerResult): void => {
    const code = ownError(r)?.error
    if (r.status !== undefined && code !== undefined) s.expect.error(code)
    s.expect.request('GET', statusClass(r.status), r.aborted ? 'aborted' : r.complete ? 'completed' : 'truncated')
  }

  /** Fills every upstream connection, then queues one caller per entry: null stays, a number gives up after that many ms. */
  async function saturate (t: Test, queued: Array<number | null>): Promise<void> {
    try {
      const fillIds = Array.from({ length: UPSTREAM_CONNECTIONS }, () => nextId('fill'))
      for (const id of fillIds) s.upstream.plan(id, { kind: 'hold' })
      const fill = fillIds.map((id) => call(s.proxyUrl, get(id, null), { timeoutMs: 12_000 }))
      assert.ok(await eventually(t, 'every upstream connection holds a request', () => fillIds.every((id) => s.upstream.seen(id).length > 0)), 'the upstream filled')
      const extraIds = queued.map(() => nextId('queued'))
      for (const id of extraIds) s.upstream.plan(id, { kind: 'hold' })
      const extra = extraIds.map((id, i) => call(s.proxyUrl, get(id, queued[i] ?? null), { timeoutMs: 12_000 }))
      if (freed === 'release') {
        const extraResults = await Promise.all(extra)
        for (const r of extraResults) tally(r)
        assert.ok(await s.counted(t), 'the sidecar counted every queued caller, its connections still held')
        s.upstream.releaseHeld()
      }
      const fillResults = await Promise.all(fill)
      const extraResults = await Promise.all(extra)
      for (const r of freed === 'release' ? fillResults : [...fillResults, ...extraResults]) tally(r)
      assert.ok(await s.settled(t), 'the sidecar counted every caller')
      // Connections freed by the 504s would take a queued request now: one more request,
      // queued after all of them, reaches the upstream only after any of them would have.
      const probeId = nextId('probe')
      const probe = await call(s.proxyUrl, get(probeId, null), { timeoutMs: 12_000 })
      tally(probe)
      assert.equal(probe.status, 200, `a request after the saturation is served (${describe(probe)})`)

      for (const r of fillResults) {
        assert.equal(r.status, freed === 'timeout' ? 504 : 502, `a caller whose request holds a connection gets ${freed === 'timeout' ? 504 : 502} (${describe(r)})`)
      }
      extraResults.forEach((r, i) => {
        const id = extraIds[i] ?? ''
        const seen = s.upstream.seen(id).length
        assert.ok(seen <= 1, `queued request ${id} sent at most once`)
        if (r.aborted) {
          assert.equal(seen, 0, `queued request ${id} whose caller gave up after ${queued[i] ?? 0} ms is never sent (sent ${seen} time)`)
          return
        }
        assert.ok(r.status !== undefined, `queued caller ${id} gets a status line (${describe(r)})`)
        const code = ownError(r)?.error
        if (r.status === 503) {
          assert.equal(code, 'UPSTREAM_BUSY', 'a 503 says UPSTREAM_BUSY')
          assert.match(headerMap(r.rawHeaders).get('retry-after')?.[0] ?? '', /^\d+$/, 'with Retry-After in seconds')
          assert.equal(seen, 0, `a request answered UPSTREAM_BUSY is never sent (${id})`)
        } else {
          assert.equal(r.status, 504, `otherwise 504 once it got a connection (${describe(r)})`)
          assert.equal(code, 'UPSTREAM_TIMEOUT')
        }
      })
    } finally {
      s.upstream.releaseHeld()
    }
  }

  await property(saturate)
  await t.test('metrics agree with what the callers saw; the queue gauge is back to 0', async (t) => {
    await s.checkMetrics(t)
    const samples = await scrapeSettled(s.adminUrl)
    t.equal(samples.get(seriesKey('store_auth_proxy_upstream_queued_requests', {})), 0, 'store_auth_proxy_upstream_queued_requests is 0 when nothing waits')
  })
  await t.test('logs', async (t) => { s.checkLogs(t) })
}

t.test('saturation: a bounded, honest queue', async (t) => {
  await saturation(t, 'timeout', async (saturate) => {
    await t.test('queued callers that stay get a status line, and a 503 UPSTREAM_BUSY one is never sent', async (t) => {
      await checkProperty(t, 'saturation, callers stay', fc.asyncProperty(
        fc.integer({ min: 1, max: 12 }),
        async (n) => { await saturate(t, Array.from({ length: n }, () => null)) }
      ), { numRuns: 2, timeLimitMs: 15_000 })
    })
  })
})

t.test('saturation: callers that give up', async (t) => {
  await saturation(t, 'release', async (saturate) => {
    await t.test('queued callers that give up are never sent, even once connections free up', async (t) => {
      await checkProperty(t, 'saturation, callers give up', fc.asyncProperty(
        // Clear of UPSTREAM_QUEUE_TIMEOUT_MS (300): a caller that gives up in the very moment
        // its 503 is written races it, and the sidecar rightly counts a 503 it sent whole.
        fc.array(fc.oneof(fc.integer({ min: 50, max: 180 }), fc.integer({ min: 450, max: 600 })), { minLength: 1, maxLength: 12 }),
        async (queued) => { await saturate(t, queued) }
      ), { numRuns: 2, timeLimitMs: 15_000 })
    })
  })
})
