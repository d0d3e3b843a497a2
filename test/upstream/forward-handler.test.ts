// The upstream exchange on its own (ForwardHandler), driven as undici drives it, with a
// caller's response that records what it was told. Two promises the sockets rarely show:
// a cache fill's replay whose caller had gone is sent, so its budget point stays taken even
// when the caller's 'close' comes after the exchange began; and a slow caller is waited for
// with one 'drain' listener, however many chunks a held answer releases at once.
import { createServer, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import t from 'tap'
import { ForwardHandler } from '../../src/upstream/forward-handler.js'
import { callerResponse, context, controller, hooks, resetting } from './forward-handler-bench.js'

t.test('a fill\'s replay for a caller already gone is sent, and its point stays taken when the caller\'s close comes late', async (t) => {
  // destroy() emits 'close' on a later tick: the exchange begins in between.
  const res = callerResponse({ destroyed: true })
  const { h, seen } = hooks({ outlivesCaller: true })
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  res.emit('close')
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.equal(asked.aborted, undefined, 'sent: its waiters need the answer')
  t.equal(seen.unsent, 0, 'so its budget point is not given back')
  handler.onResponseStart(c, 200, { 'content-length': '2' })
  handler.onResponseData(c, Buffer.from('ok'))
  handler.onResponseEnd()
  t.equal(seen.unsent, 0)
})

t.test('a request whose caller leaves while it is queued is dropped unsent and gives its point back, once', async (t) => {
  for (const outlivesCaller of [false, true]) {
    const res = callerResponse()
    const { h, seen } = hooks({ outlivesCaller })
    const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
    res.destroyed = true
    res.emit('close')
    t.equal(seen.unsent, 1, 'at once, not when its request would have reached a connection')
    const { c, seen: asked } = controller()
    handler.onRequestStart(c)
    t.ok(asked.aborted, `dropped (outlivesCaller ${outlivesCaller})`)
    t.equal(seen.unsent, 1, 'its point given back once')
  }
})

t.test('a queued request whose caller closed its side is dropped unsent, though its response closes only a turn later', async (t) => {
  // A real caller on a real server: Node ends the connection when the caller closes its side
  // and closes the response in a later turn. A connection freed in between (here: in the
  // socket's own 'end', after Node's) must not carry the request of a caller that has gone.
  const { h, seen } = hooks()
  const dropped = new Promise<{ aborted: boolean, resClosed: boolean }>((resolve) => {
    const server = createServer((req, res) => {
      const handler = new ForwardHandler('GET', res, h, context())
      let resClosed = false
      res.once('close', () => { resClosed = true })
      req.socket.once('end', () => {
        const { c, seen: asked } = controller()
        handler.onRequestStart(c)
        resolve({ aborted: asked.aborted !== undefined, resClosed })
      })
    })
    t.teardown(() => { server.close() })
    server.listen(0, '127.0.0.1', () => {
      const caller = connect((server.address() as AddressInfo).port, '127.0.0.1', () => {
        caller.end('GET /x HTTP/1.1\r\nHost: x\r\n\r\n')
      })
      caller.resume()
    })
  })
  const { aborted, resClosed } = await dropped
  t.notOk(resClosed, 'the response had not closed yet (the window this closes)')
  t.ok(aborted, 'dropped before a byte is written')
  t.equal(seen.sending, 0, 'never asked to send')
  t.equal(seen.unsent, 1, 'its point given back once')
})

t.test('a caller whose socket does not say whether it is writable (light-my-request\'s inject) is sent', async (t) => {
  const res = Object.assign(callerResponse(), { req: { socket: {} } })
  const { h, seen } = hooks()
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.equal(asked.aborted, undefined, 'sent')
  t.equal(seen.sending, 1)
  t.equal(seen.unsent, 0)
})

t.test('a held answer released to a slow caller waits for one drain, not one per chunk', async (t) => {
  const res = callerResponse({ full: true })
  const { h } = hooks({ holds: () => 1024 })
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  handler.onResponseStart(c, 200, { 'content-length': String(64 * 512) })
  // 64 chunks of 512 bytes: the 3rd passes the 1 KiB limit and releases them all at once.
  for (let i = 0; i < 64; i++) handler.onResponseData(c, Buffer.alloc(512))
  t.equal(res.written.length, 64, 'every chunk went to the caller')
  t.equal(res.listenerCount('drain'), 1, 'one drain listener')
  t.equal(asked.pauses, 1, 'paused once')
  res.emit('drain')
  t.equal(asked.resumes, 1, 'resumed at the drain')
  t.equal(res.listenerCount('drain'), 0)
  handler.onResponseData(c, Buffer.alloc(512))
  t.equal(res.listenerCount('drain'), 1, 'and waits again when the next write finds it full')
  t.equal(asked.pauses, 2)
})

t.test('`sending` comes once, as the request reaches its connection, never for one dropped unsent', async (t) => {
  const { h, seen } = hooks()
  const handler = new ForwardHandler('GET', callerResponse() as unknown as ServerResponse, h, context())
  t.equal(seen.sending, 0, 'queued: not yet')
  const { c } = controller()
  handler.onRequestStart(c)
  t.equal(seen.sending, 1, 'on its connection, before any byte is written')
  handler.onResponseStart(c, 200, { 'content-length': '0' })
  handler.onResponseEnd()
  t.same([seen.sending, seen.unsent], [1, 0])

  const gone = hooks()
  const res = callerResponse()
  const dropped = new ForwardHandler('GET', res as unknown as ServerResponse, gone.h, context())
  res.emit('close')
  dropped.onRequestStart(controller().c)
  t.same([gone.seen.sending, gone.seen.unsent], [0, 1], 'its caller left while it was queued: given back, never sent')
})

t.test('`sending` may stop it: nothing written, its point given back, then `failed` with the reason', async (t) => {
  const why = new Error('refused as it was leaving')
  const { h, seen } = hooks({ sending: () => why })
  const res = callerResponse()
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  t.equal(asked.aborted, why, 'aborted before a byte is written')
  t.equal(seen.unsent, 1, 'given back')
  // undici reports the abort as the exchange's error.
  handler.onResponseError(c, why)
  t.same(seen.failed, [why], 'the caller is answered for it')
  t.equal(seen.unsent, 1, 'once')
  t.notOk(res.headersSent)
})

t.test('a status outside 100..999 is a bad answer; 100 is interim and 999 an answer', async (t) => {
  for (const statusCode of [99, 1000]) {
    const { h, seen } = hooks()
    const res = callerResponse()
    const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
    const { c, seen: asked } = controller()
    handler.onRequestStart(c)
    handler.onResponseStart(c, statusCode, {})
    t.equal((asked.aborted as { code?: string } | undefined)?.code, 'UPSTREAM_BAD_RESPONSE', `${statusCode}: aborted as bad`)
    t.same([res.headersSent, seen.started], [false, 0], `${statusCode}: nothing passed on`)
  }
  const { h, seen } = hooks()
  const res = callerResponse()
  const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
  const { c, seen: asked } = controller()
  handler.onRequestStart(c)
  handler.onResponseStart(c, 100, {})
  t.same([asked.aborted, seen.started], [undefined, 0], '100: waits for the final answer')
  handler.onResponseStart(c, 999, { 'content-length': '0' })
  t.same([asked.aborted, res.statusCode, seen.started], [undefined, 999, 1], '999: passed on')
})

t.test('an answer head Node refuses is a bad answer: nothing starts, and a held one released writes nothing', async (t) => {
  for (const hold of [false, 4]) {
    const { h, seen } = hooks({ holds: () => hold })
    const res = callerResponse({ refusesHead: true })
    const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, context())
    const { c, seen: asked } = controller()
    handler.onRequestStart(c)
    handler.onResponseStart(c, 200, { 'content-length': '8' })
    // Held: the head is written only once the answer outgrows the hold (undici sends no data after an abort).
    if (hold !== false) handler.onResponseData(c, Buffer.from('12345678'))
    const aborted = asked.aborted as (Error & { code?: string }) | undefined
    t.equal(aborted?.code, 'UPSTREAM_BAD_RESPONSE', `held ${hold}: aborted as bad`)
    t.type(aborted?.cause, TypeError, 'with Node\'s refusal as its cause')
    t.same([seen.started, res.written.length], [0, 0], `held ${hold}: nothing started or written`)
  }
})

t.test('an answer whose end its framing marks is complete, though the connection resets as it ends', async (t) => {
  const framed: Array<[string, number, Record<string, string>]> = [
    ['GET', 200, { 'content-length': '2' }],
    ['GET', 200, { 'transfer-encoding': 'chunked' }],
    ['GET', 204, {}],
    ['GET', 304, {}],
    ['HEAD', 200, {}]
  ]
  for (const [method, statusCode, headers] of framed) {
    const { h, seen } = hooks()
    const res = callerResponse()
    const handler = new ForwardHandler(method, res as unknown as ServerResponse, h, resetting())
    const { c } = controller()
    handler.onRequestStart(c)
    handler.onResponseStart(c, statusCode, headers)
    handler.onResponseEnd()
    t.same([res.ended, res.destroyed, seen.truncated], [true, false, 0], `${method} ${statusCode} ${JSON.stringify(headers)}: ended`)
  }
})

t.test('an answer that only the connection\'s close ends is cut when it resets: a held one fails, a streamed one is cut', async (t) => {
  for (const hold of [false, true]) {
    const { h, seen } = hooks({ holds: () => hold })
    const res = callerResponse()
    const handler = new ForwardHandler('GET', res as unknown as ServerResponse, h, resetting())
    const { c } = controller()
    handler.onRequestStart(c)
    handler.onResponseStart(c, 200, {})
    handler.onResponseData(c, Buffer.from('ok'))
    handler.onResponseEnd()
    t.same([res.ended, seen.held], [false, 0], `held ${hold}: not taken for complete`)
    if (hold) t.same(seen.failed.map((err) => (err as { code?: string }).code), ['ECONNRESET'], 'the caller still gets a 502')
    else t.same([seen.truncated, res.destroyed], [1, true], 'the caller\'s connection is cut')
  }
})
