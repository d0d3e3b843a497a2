// The request stage on its own (stages/request.ts): its refusal from the head, and the body
// stage's bounds, with recorded requests and a fake clock for the discard bound.
import { EventEmitter } from 'node:events'
import { PassThrough } from 'node:stream'
import FakeTimers from '@sinonjs/fake-timers'
import type { FastifyReply, FastifyRequest } from 'fastify'
import t from 'tap'
import { DISCARD_BODY_MS, REPLAY_BODY_MAX_BYTES } from '../../src/proxy/exchange.js'
import { createBodyStage, headProblem } from '../../src/proxy/stages/request.js'

/** A request with a body still being sent, and its reply; `length` as its Content-Length. */
function exchange (length?: number) {
  const socket = Object.assign(new EventEmitter(), { destroyed: false, destroy () { socket.destroyed = true } })
  const raw = Object.assign(new EventEmitter(), { complete: false, socket, rawHeaders: [] as string[], headers: {} })
  const body = new PassThrough()
  const request = {
    method: 'POST',
    url: '/x',
    raw,
    body,
    headers: length === undefined ? {} : { 'content-length': String(length) },
    exchange: { reservedBytes: 0 }
  } as unknown as FastifyRequest
  const reply = { raw: new EventEmitter() } as unknown as FastifyReply
  return { request, reply, raw, socket, body }
}

t.test('a method outside the forwarded set is refused from its head', async (t) => {
  const request = { method: 'TRACE', url: '/x', raw: { rawHeaders: ['Host', 'x'], headers: {} } } as unknown as FastifyRequest
  t.equal((headProblem(request) as { statusCode?: number } | undefined)?.statusCode, 405)
})

t.test('with no body limit, a chunked body streams as it came', async (t) => {
  const { request, reply, body } = exchange()
  await createBodyStage({ maxBodyBytes: 0 }).read(request, reply)
  t.equal(request.body, body, 'not counted against a limit of 0')
})

t.test('a chunked body the caller aborts fails the counted stream that carries it', async (t) => {
  const { request, reply, body } = exchange()
  await createBodyStage({ maxBodyBytes: 1024 }).read(request, reply)
  const limited = request.body as PassThrough
  t.not(limited, body, 'counted as it streams')
  const errors: Error[] = []
  limited.on('error', (err) => { errors.push(err) }) // as its reader (undici) listens
  const aborted = new Error('aborted')
  body.destroy(aborted)
  // destroy() emits its 'error' a turn later.
  await new Promise((resolve) => { setImmediate(resolve) })
  t.same(errors, [aborted])
})

t.test('after the answer, the rest of a body is read for a bounded time, unless it ended', async (t) => {
  const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout'] })
  t.teardown(() => { clock.uninstall() })
  const stage = createBodyStage({ maxBodyBytes: 0 })
  type Case = { name: string, end?: (e: ReturnType<typeof exchange>) => void, then?: (e: ReturnType<typeof exchange>) => void, cut: boolean }
  const cases: Case[] = [
    { name: 'still sending: cut at the bound', cut: true },
    { name: 'complete before the answer', end: (e: ReturnType<typeof exchange>) => { e.raw.complete = true }, cut: false },
    { name: 'ended after the answer', then: (e: ReturnType<typeof exchange>) => { e.raw.emit('end') }, cut: false }
  ]
  for (const { name, end, then, cut } of cases) {
    const e = exchange(REPLAY_BODY_MAX_BYTES + 1)
    await stage.read(e.request, e.reply)
    end?.(e)
    e.reply.raw.emit('finish')
    then?.(e)
    await clock.tickAsync(DISCARD_BODY_MS)
    t.equal(e.socket.destroyed, cut, name)
  }
})
