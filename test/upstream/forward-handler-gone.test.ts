// The exchange (ForwardHandler) once its caller has gone, or it waited too long for a
// connection: in each phase it is dropped, aborted or read on for a cache fill's waiters, and
// the caller is never written to nor told twice. Driven as undici drives it (forward-handler-bench.ts).
import type { ServerResponse } from 'node:http'
import t from 'tap'
import { ForwardHandler, type ForwardContext, type ForwardHooks } from '../../src/upstream/forward-handler.js'
import { callerResponse, context, controller, fakeTimers, hooks, leave } from './forward-handler-bench.js'

/** An exchange on its connection: the request is written. */
function sent (over: Partial<ForwardHooks> = {}, ctx: ForwardContext = context()) {
  const res = callerResponse()
  const { h, seen } = hooks(over)
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, ctx)
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  return { res, seen, handler, c, asked }
}

const abortedByCaller = new Error('the caller closed the connection')

t.test('a caller that leaves while its request is on the wire aborts it, and is told nothing of its failure', async (t) => {
  const { res, seen, handler, c, asked } = sent()
  leave(res)
  t.ok(asked.aborted, 'aborted: nobody else wants the answer')
  t.equal(seen.unsent, 0, 'it was written: its point stays taken')
  handler.onResponseError(c, abortedByCaller)
  t.same([seen.failed.length, seen.truncated], [0, 0])
})

t.test('a fill whose caller left while it was on the wire is read on, and its waiters are told if it fails', async (t) => {
  const { res, seen, handler, c, asked } = sent({ outlivesCaller: true })
  leave(res)
  t.equal(asked.aborted, undefined, 'read on for its waiters')
  const err = new Error('the upstream reset the connection')
  handler.onResponseError(c, err)
  t.same(seen.failed, [err], 'its waiters are told, once')
  t.same([seen.unsent, seen.truncated], [0, 0])
})

t.test('a fill dropped unsent because its caller left while queued tells its waiters nothing: they go on without it', async (t) => {
  const res = callerResponse()
  const { h, seen } = hooks({ outlivesCaller: true })
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  leave(res)
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.ok(asked.aborted, 'dropped')
  handler.onResponseError(c, asked.aborted as Error)
  t.same([seen.unsent, seen.failed.length], [1, 0])
})

t.test('a request whose caller had gone before it queued is dropped and gives its point back, though no close comes', async (t) => {
  // light-my-request's socket does not say whether it is writable: only the response says it is gone.
  const res = Object.assign(callerResponse({ destroyed: true }), { req: { socket: {} } })
  const { h, seen } = hooks()
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.ok(asked.aborted, 'dropped')
  t.same([seen.sending, seen.unsent], [0, 1], 'never asked to send; its point given back')
})

t.test('a fill whose caller left before its answer began is aborted, not written, when the answer would stream', async (t) => {
  const { res, seen, handler, c, asked } = sent({ outlivesCaller: true })
  leave(res)
  handler.onResponseStart(c, 200, { 'content-length': '2' })
  t.ok(asked.aborted, 'aborted: nobody takes a streamed answer')
  t.same([res.headersSent, seen.started], [false, 0], 'never written to')
})

t.test('a fill whose caller left while its answer is held is aborted, not written, when the answer outgrows the hold', async (t) => {
  const { res, seen, handler, c, asked } = sent({ outlivesCaller: true, holds: () => 4 })
  handler.onResponseStart(c, 200, { 'content-length': '8' })
  leave(res)
  t.equal(asked.aborted, undefined, 'held for its waiters')
  handler.onResponseData(c, Buffer.from('12345678'))
  t.ok(asked.aborted, 'too large to hold: aborted')
  t.same([res.headersSent, res.written.length, seen.started], [false, 0, 0], 'never written to')
})

t.test('a caller gone while its answer streams aborts it, and is not counted as cut by the upstream', async (t) => {
  for (const outlivesCaller of [false, true]) {
    const { res, seen, handler, c, asked } = sent({ outlivesCaller })
    handler.onResponseStart(c, 200, { 'content-length': '8' })
    handler.onResponseData(c, Buffer.from('1234'))
    leave(res)
    t.ok(asked.aborted, `aborted (outlivesCaller ${outlivesCaller})`)
    handler.onResponseError(c, abortedByCaller)
    t.equal(seen.truncated, 0, 'its abort is not the upstream cutting the answer')
  }
})

t.test('a caller whose response was destroyed, its close not come yet, is not told of a failure', async (t) => {
  const { res, seen, handler, c } = sent()
  res.destroyed = true
  handler.onResponseError(c, new Error('the upstream reset the connection'))
  t.same([seen.failed.length, seen.truncated], [0, 0])
})

t.test('an exchange that ended leaves no listener on its caller\'s response: a later close aborts nothing', async (t) => {
  const { res, handler, c, asked } = sent()
  handler.onResponseStart(c, 200, { 'content-length': '0' })
  handler.onResponseEnd()
  t.equal(res.listenerCount('close'), 0)
  leave(res)
  t.equal(asked.aborted, undefined)
})

t.test('a request that waited too long is answered 503 once: its point back first, then dropped unsent at its connection', async (t) => {
  const clock = fakeTimers(t)
  const res = callerResponse()
  const { h, seen } = hooks()
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context({ queueTimeoutMs: 1_000 }))
  handler.armQueueTimer()
  await clock.tickAsync(1_000)
  t.same(seen.calls, ['unsent', 'failed'], 'given back before the caller is answered')
  t.equal((seen.failed[0] as { code?: string }).code, 'UPSTREAM_BUSY')
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.ok(asked.aborted, 'dropped when it reaches a connection')
  t.equal(seen.sending, 0, 'never sent')
  // undici reports the abort as the exchange's error: the caller was answered already.
  handler.onResponseError(c, asked.aborted as Error)
  t.same(seen.calls, ['unsent', 'failed'], 'nothing more')
})

t.test('a request already on its connection when the queue\'s timer would be armed arms none', async (t) => {
  const clock = fakeTimers(t)
  const { handler } = sent()
  handler.armQueueTimer()
  t.equal(clock.countTimers(), 0, 'nothing holds the process for the queue\'s timeout')
})
