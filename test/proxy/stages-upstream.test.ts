// The upstream stage's send and what it does with each turn of the answer, set up on the bench
// with a recording pool: the token it goes with, the body and its length, whether it outlives its
// caller, a 401 held for a replay or kept as a key's answer, and a caller gone meanwhile.
import t, { type Test } from 'tap'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Rule } from '../../src/config/rate-limit-rules.js'
import type { Fill } from '../../src/cache/fill.js'
import { UpstreamBusyError, UpstreamTimeoutError } from '../../src/http/errors.js'
import type { Ticket } from '../../src/quota/guard.js'
import type { Token } from '../../src/token/token-manager.js'
import type { ForwardHooks, HeldAnswer, UpstreamRequest } from '../../src/upstream/forward.js'
import { createUpstreamStage } from '../../src/proxy/stages/upstream.js'
import { stageBench, UNTOUCHED, type Sent } from './stage-bench.js'

const RULE = { id: '* /v2/**', limits: [] } as unknown as Rule
const TICKET = { scope: RULE.id, limits: [], id: 'point-1' } as unknown as Ticket
const TAKEN = { generation: 1, authorization: 'Bearer taken' } as unknown as Token
const NEWER = { generation: 2, authorization: 'Bearer newer' } as unknown as Token
const held = (statusCode: number, body = 'held'): HeldAnswer =>
  ({ statusCode, headers: { 'content-length': String(body.length) }, body: Buffer.from(body) }) as unknown as HeldAnswer

interface Turn {
  gone?: boolean
  replayed?: boolean
  /** The request's idempotency key (its claim keyed). */
  keyed?: boolean
  fill?: boolean
  body?: unknown
  /** What happens once it is handed to the pool. */
  then?: (handler: ForwardHooks, request: FastifyRequest) => void
}

/** `newest`: the token manager's current token (null: none valid now). */
function upstreamBench (t: Test, { newest = TAKEN as Token | null } = {}) {
  const bench = stageBench(t)
  const sent: Array<{ request: UpstreamRequest, handler: ForwardHooks }> = []
  const upstream = {
    forward: (request: UpstreamRequest, _res: unknown, handler: ForwardHooks) => { sent.push({ request, handler }) },
    queued: () => 3
  }
  const quota = {
    held: () => { bench.calls.push(['quota.held']) },
    refund: (ticket: Ticket | undefined) => { bench.calls.push(['refund', ticket]) }
  }
  const idempotency = {
    sending: () => {},
    keyed: (claim: unknown) => claim === 'key-1',
    rejected: () => {},
    failed: () => {},
    answered: async (claim: unknown) => { bench.calls.push(['answered', claim]) },
    unsent: (claim: unknown) => { bench.calls.push(['unsent', claim]) }
  }
  const path = {
    ...bench.path,
    replay: (_request: FastifyRequest, _reply: FastifyReply, answer: HeldAnswer) => { bench.calls.push(['replay', answer.statusCode]) }
  }
  const stage = createUpstreamStage(bench.options({
    upstreamUrl: 'http://ti.example:8080', tokens: { current: () => newest ?? undefined }, upstream, quota, idempotency, cache: {}
  } as never), path)
  return {
    ...bench,
    sent,
    async forward (turn: Turn = {}, caller: Sent = {}) {
      return await bench.run('/v2/store/x', (request, reply) => {
        request.exchange.gone = turn.gone ?? false
        request.replayed = turn.replayed ?? false
        request.token = TAKEN
        request.claim = (turn.keyed === true ? 'key-1' : null) as never
        request.replayBody = null
        request.upstreamPath = '/v2/store/x'
        request.body = turn.body
        if (turn.fill === true) request.fill = { flight: {}, rule: RULE } as unknown as Fill
        stage.forward(request, reply, RULE, TICKET)
        const last = sent.at(-1)
        if (last !== undefined) turn.then?.(last.handler, request)
      }, caller)
    }
  }
}

function header (headers: string[], name: string): string | undefined {
  const at = headers.findIndex((h, i) => i % 2 === 0 && h.toLowerCase() === name)
  return at === -1 ? undefined : headers[at + 1]
}

t.test('a request that waited goes with the newest token, not the one it took', async (t) => {
  const b = upstreamBench(t, { newest: NEWER })
  await b.forward()
  t.equal(header(b.sent[0]!.request.headers as string[], 'authorization'), 'Bearer newer')
  const same = upstreamBench(t, { newest: TAKEN })
  await same.forward()
  t.equal(header(same.sent[0]!.request.headers as string[], 'authorization'), 'Bearer taken')
  // None current (the newest was rejected, its successor not yet here): the one it took.
  const none = upstreamBench(t, { newest: null })
  await none.forward()
  t.equal(header(none.sent[0]!.request.headers as string[], 'authorization'), 'Bearer taken')
})

t.test('a body goes with its length; a GET\'s body is consumed, its length not forwarded', async (t) => {
  const b = upstreamBench(t)
  const stream = { readable: true }
  await b.forward({ body: stream }, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hello' })
  t.equal(b.sent[0]!.request.body, stream)
  t.equal(header(b.sent[0]!.request.headers as string[], 'content-length'), '5')
  await b.forward({ body: undefined }, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hello' })
  t.equal(b.sent[1]!.request.body, null)
  t.equal(header(b.sent[1]!.request.headers as string[], 'content-length'), undefined, 'no body: no length')
})

t.test('only a cache fill or a keyed send outlives its caller', async (t) => {
  const b = upstreamBench(t)
  await b.forward()
  await b.forward({ fill: true })
  await b.forward({ keyed: true })
  t.same(b.sent.map((s) => s.handler.outlivesCaller), [false, true, true])
})

t.test('a 401 is replayed, except a keyed replay\'s own 401: that is the key\'s answer', async (t) => {
  const b = upstreamBench(t)
  const answer401 = (handler: ForwardHooks): void => { handler.held(held(401, 'denied')) }
  await b.forward({ then: answer401 })
  await b.forward({ then: answer401, replayed: true })
  await b.forward({ then: answer401, keyed: true })
  t.same(b.names(), ['replay', 'replay', 'replay'])

  b.calls.length = 0
  const res = await b.forward({ then: answer401, keyed: true, replayed: true })
  t.equal(res.status, 401)
  t.equal(res.body, 'denied')
  t.same(b.calls, [['quota.held'], ['answered', 'key-1']])
})

t.test('a held answer goes to its caller once kept for the key; to nobody once the caller left', async (t) => {
  const b = upstreamBench(t)
  const answer = (handler: ForwardHooks): void => { handler.held(held(201, 'made')) }
  const keyed = await b.forward({ then: answer, keyed: true })
  t.equal(keyed.status, 201)
  t.equal(keyed.body, 'made')
  t.equal((await b.forward({ then: answer, keyed: true, gone: true })).status, UNTOUCHED, 'kept for the key all the same')
  t.equal((await b.forward({ then: answer, gone: true })).status, UNTOUCHED)
  t.same(b.names(), ['quota.held', 'answered', 'quota.held', 'answered', 'quota.held'])
})

t.test('nothing of it sent: the point back; its key free, or, its caller gone, its waiters', async (t) => {
  const b = upstreamBench(t)
  const unsent = (handler: ForwardHooks): void => { handler.unsent?.() }
  await b.forward({ then: unsent, keyed: true })
  await b.forward({ then: unsent, keyed: true, gone: true })
  t.same(b.calls, [['refund', TICKET], ['unsent', 'key-1'], ['refund', TICKET], ['abandon', '/v2/store/x']])
})

t.test('a send that failed: the caller\'s error, logged; nothing for a caller gone', async (t) => {
  const b = upstreamBench(t)
  const busy = await b.forward({ then: (handler) => { handler.failed(new UpstreamBusyError()) } })
  t.equal(busy.status, 503)
  t.match(b.logs.entries().find((e) => e.msg === 'no upstream connection came free in time'), { level: 40, queued: 3 })
  const gone = await b.forward({ then: (handler) => { handler.failed(new UpstreamTimeoutError()) }, gone: true })
  t.equal(gone.status, UNTOUCHED)
  t.equal(b.logs.entries().filter((e) => e.msg === 'upstream request failed').length, 0)
})
