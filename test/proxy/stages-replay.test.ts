// The 401 replay's turns around a caller that leaves, each set up on the bench: before the
// new token is asked, while it is awaited, and when none comes; a cache fill with others
// waiting for it is replayed all the same.
import t, { type Test } from 'tap'
import type { FastifyRequest } from 'fastify'
import type { Fill } from '../../src/cache/fill.js'
import type { Token } from '../../src/token/token-manager.js'
import type { HeldAnswer } from '../../src/upstream/forward.js'
import { createReplayStage } from '../../src/proxy/stages/replay.js'
import { stageBench, UNTOUCHED } from './stage-bench.js'

const REJECTED = { generation: 4, authorization: 'Bearer rejected' } as unknown as Token
const FRESH = { generation: 5, authorization: 'Bearer fresh' } as unknown as Token
const UNAUTHORIZED = { statusCode: 401, headers: { 'content-length': '6' }, body: Buffer.from('denied') } as unknown as HeldAnswer

interface Turn {
  gone?: boolean
  /** The caller leaves while the new token is awaited. */
  leavesMeanwhile?: boolean
  /** The request leads a cache fill with this many waiting for it. */
  waiting?: number
}

function replayBench (t: Test, renewed: Token | undefined) {
  const bench = stageBench(t)
  let leaving: FastifyRequest | undefined
  const tokens = {
    renewed: async (rejected: number) => {
      bench.calls.push(['renewed', rejected])
      if (leaving !== undefined) leaving.exchange.gone = true
      return renewed
    }
  }
  const idempotency = { unsent: (claim: unknown) => { bench.calls.push(['unsent', claim]) } }
  const path = {
    ...bench.path,
    proceed: (request: FastifyRequest) => { bench.calls.push(['proceed', request.token, request.replayed]) }
  }
  const stage = createReplayStage(bench.options({ tokens, idempotency } as never), path)
  return {
    ...bench,
    replay: async ({ gone = false, leavesMeanwhile = false, waiting }: Turn = {}) => {
      leaving = undefined
      return await bench.run('/v2/store/x', (request, reply) => {
        request.exchange.gone = gone
        request.token = REJECTED
        request.claim = 'key-1' as never
        if (leavesMeanwhile) leaving = request
        if (waiting !== undefined) {
          request.fill = {
            flight: {
              waiting: () => waiting,
              fail: (failure: unknown) => { bench.calls.push(['fail', failure]) }
            }
          } as unknown as Fill
        }
        stage.replay(request, reply, UNAUTHORIZED)
      })
    }
  }
}

t.test('a request rejected with 401 is sent once more, marked replayed, with the new token', async (t) => {
  const b = replayBench(t, FRESH)
  await b.replay()
  t.same(b.calls, [['renewed', REJECTED.generation], ['proceed', FRESH, true]])
  t.match(b.logs.entries().find((e) => e.msg === 'replaying a request rejected with 401 with a new token'), { level: 20, generation: 5 })
})

t.test('a caller gone before the replay: nothing more sent, no token asked for it', async (t) => {
  const b = replayBench(t, FRESH)
  t.equal((await b.replay({ gone: true })).status, UNTOUCHED)
  t.equal((await b.replay({ gone: true, waiting: 0 })).status, UNTOUCHED, 'a fill nobody waits for')
  t.same(b.calls, [['abandon', '/v2/store/x'], ['abandon', '/v2/store/x']])
})

t.test('a caller gone while the new token was awaited: nothing more sent', async (t) => {
  const b = replayBench(t, FRESH)
  t.equal((await b.replay({ leavesMeanwhile: true })).status, UNTOUCHED)
  t.same(b.calls, [['renewed', REJECTED.generation], ['abandon', '/v2/store/x']])
})

t.test('a fill others wait for is replayed for them, its own caller gone', async (t) => {
  const b = replayBench(t, FRESH)
  await b.replay({ gone: true, waiting: 2 })
  t.same(b.calls, [['renewed', REJECTED.generation], ['proceed', FRESH, true]])
})

t.test('no new token: the 401 is the answer, the key free; nothing for a caller gone', async (t) => {
  const b = replayBench(t, undefined)
  const res = await b.replay()
  t.equal(res.status, 401)
  t.equal(res.body, 'denied')
  t.same(b.calls, [['renewed', REJECTED.generation], ['unsent', 'key-1']])

  b.calls.length = 0
  t.equal((await b.replay({ gone: true, waiting: 1 })).status, UNTOUCHED, 'its waiters get the 401, its gone caller nothing')
  t.same(b.calls, [['renewed', REJECTED.generation], ['fail', { answer: UNAUTHORIZED }], ['unsent', 'key-1']])
})
