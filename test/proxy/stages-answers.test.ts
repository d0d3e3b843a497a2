// Any stage's error as the caller's answer (exchange.ts), on the bench: the sidecar's own
// errors as they are, a failure of ours as a logged 500, another 4xx as a plain 400 (its
// wording, which may echo the URL, only logged), and nothing for a caller gone.
import t, { type Test } from 'tap'
import type { FastifyError, FastifyRequest } from 'fastify'
import { BodyTooLargeError } from '../../src/http/errors.js'
import { callerGone, createAnswers } from '../../src/proxy/exchange.js'
import { stageBench, UNTOUCHED } from './stage-bench.js'

function error (message: string, fields: Partial<FastifyError> = {}): FastifyError {
  return Object.assign(new Error(message), fields) as FastifyError
}

function answersBench (t: Test) {
  const bench = stageBench(t)
  const answers = createAnswers({ metrics: bench.metrics })
  return {
    ...bench,
    fail: async (err: FastifyError, leave: (request: FastifyRequest) => void = () => {}) =>
      await bench.run('/v2/store/x', (request, reply) => {
        leave(request)
        answers.fail(err, request, reply)
      }),
    logged: (msg: string) => bench.logs.entries().filter((e) => e.msg === msg)
  }
}

t.test('the sidecar\'s own error is answered as it is', async (t) => {
  const b = answersBench(t)
  const res = await b.fail(new BodyTooLargeError(10))
  t.equal(res.status, 413)
  t.equal(JSON.parse(res.body).error, 'BODY_TOO_LARGE')
})

t.test('a failure of ours, with a 5xx status or none: a 500, its error logged', async (t) => {
  const b = answersBench(t)
  for (const err of [error('socket hang up in a stage'), error('exactly 500', { statusCode: 500 }), error('a 503 of a plugin', { statusCode: 503 })]) {
    const res = await b.fail(err)
    t.equal(res.status, 500, err.message)
    t.same(JSON.parse(res.body), { error: 'INTERNAL_ERROR', message: 'the sidecar failed to handle the request' })
  }
  t.same(b.logged('request failed').map((e) => [e.level, (e.err as { message: string }).message]),
    [[50, 'socket hang up in a stage'], [50, 'exactly 500'], [50, 'a 503 of a plugin']])
})

t.test('Fastify\'s or a plugin\'s own 4xx: a plain 400, its wording only logged', async (t) => {
  const b = answersBench(t)
  const res = await b.fail(error('Unsupported Media Type: /v2/secret-path', { statusCode: 415, code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE' }))
  t.equal(res.status, 400)
  t.same(JSON.parse(res.body), { error: 'BAD_REQUEST', message: 'the request is malformed' })
  t.match(b.logged('request refused'), [{ level: 20, code: 'FST_ERR_CTP_INVALID_MEDIA_TYPE', reason: 'Unsupported Media Type: /v2/secret-path' }])
  t.equal(b.logged('request failed').length, 0, 'not a failure of ours')
  t.equal((await b.fail(error('just below', { statusCode: 499 }))).status, 400)
})

t.test('a caller gone gets nothing: its leaving is logged as ordinary, not as a failure', async (t) => {
  const b = answersBench(t)
  const res = await b.fail(error('aborted', { code: 'FST_ERR_REQ_ABORTED' }), (request) => { request.exchange.gone = true })
  t.equal(res.status, UNTOUCHED)
  t.match(b.logged('caller closed the connection before its request was sent'), [{ level: 20, code: 'FST_ERR_REQ_ABORTED', reason: 'aborted' }])
  t.equal(b.logged('request failed').length, 0)
})

t.test('a caller is gone once its connection is, before its exchange has noticed', async (t) => {
  const b = answersBench(t)
  const seen: boolean[] = []
  await b.run('/x', (request) => {
    seen.push(callerGone(request))
    Object.defineProperty(request.raw.socket, 'destroyed', { value: true, configurable: true })
    seen.push(callerGone(request))
  })
  t.same(seen, [false, true])
})
