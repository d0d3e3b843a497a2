// The cache stage's answers to a fetch's waiters when the fetch failed, which requests it takes,
// and a cache that fails, each turn set up on the bench: the RateLimit fields a waiter's answer
// carries, a caller gone meanwhile, a budget refusal shared with the waiters.
import t, { type Test } from 'tap'
import type { FastifyRequest } from 'fastify'
import type { CacheOption, Rule } from '../../src/config/rate-limit-rules.js'
import type { Failure } from '../../src/cache/flights.js'
import type { Fill } from '../../src/cache/fill.js'
import { UpstreamRateLimitedError, UpstreamTimeoutError } from '../../src/http/errors.js'
import { createCacheStage } from '../../src/proxy/stages/cached.js'
import { stageBench, UNTOUCHED } from './stage-bench.js'

const CACHED = { id: 'GET /v2/store/**', limits: [], cache: { ttlMs: 1000 } } as unknown as Rule & { cache: CacheOption }
const BUDGETED = { id: 'GET /v2/other/**', limits: [] } as unknown as Rule

interface BenchOptions {
  /** RATE_LIMIT_HEADERS on: the stage gets fields, which record what they are asked. */
  fields?: boolean
  /** The caller leaves while its rule's budget is read for the fields. */
  leaveDuringFields?: boolean
  find?: () => Promise<unknown>
}

function cacheBench (t: Test, { fields = true, leaveDuringFields = false, find = async () => ({}) }: BenchOptions = {}) {
  const bench = stageBench(t)
  let current: FastifyRequest | undefined
  const recordingFields = {
    withFields: (rule: Rule | undefined, _res: unknown, then: () => void) => {
      bench.calls.push(['withFields', rule])
      if (leaveDuringFields && current !== undefined) current.exchange.gone = true
      then()
    },
    refused: (rule: Rule | undefined, _res: unknown, retryAfterMs: number) => { bench.calls.push(['refused', rule, retryAfterMs]) }
  }
  const quota = { active: true, ruleFor: (_method: string, url: string) => url.startsWith('/v2/store/') ? CACHED : BUDGETED }
  const cache = { find }
  const stage = createCacheStage({
    ...bench.options({ quota, cache, upstreamUrl: 'http://ti.invalid' } as never),
    fields: fields ? recordingFields : undefined
  } as never, bench.path)
  const run = async (gone: boolean, then: (request: FastifyRequest, reply: Parameters<Parameters<typeof bench.run>[1]>[1]) => void, url = '/v2/store/x') =>
    await bench.run(url, (request, reply) => {
      current = request
      request.exchange.gone = gone
      then(request, reply)
    })
  return {
    ...bench,
    stage,
    /** A waiter answered with its fetch's failure. */
    fail: async (failure: Failure, { gone = false } = {}) => await run(gone, (request, reply) => { stage.answerFailure(request, reply, failure) }),
    ask: async ({ gone = false } = {}) => await run(gone, (request, reply) => { stage.ask(request, reply, CACHED) })
  }
}

const HELD: Failure = { answer: { statusCode: 503, headers: { 'content-type': 'text/plain', 'content-length': '4' }, body: Buffer.from('down') } }

t.test('a waiter whose fetch failed gets TI\'s held answer, with its rule\'s RateLimit fields', async (t) => {
  const b = cacheBench(t)
  const res = await b.fail(HELD)
  t.equal(res.status, 503)
  t.equal(res.body, 'down')
  t.same(b.calls, [['withFields', CACHED]], 'the fields of the waiter\'s own rule')
})

t.test('a waiter gone before or while its fields are read is answered nothing', async (t) => {
  const gone = cacheBench(t)
  t.equal((await gone.fail(HELD, { gone: true })).status, UNTOUCHED)
  t.equal((await gone.fail({ error: new UpstreamTimeoutError() }, { gone: true })).status, UNTOUCHED)
  t.same(gone.calls, [], 'not even its fields read')

  const leaving = cacheBench(t, { leaveDuringFields: true })
  t.equal((await leaving.fail(HELD)).status, UNTOUCHED, 'left while the budget was read')
  t.equal((await leaving.fail({ error: new UpstreamTimeoutError() })).status, UNTOUCHED)
})

t.test('a waiter refused with its fetch\'s budget refusal reads as any local refusal', async (t) => {
  const b = cacheBench(t)
  const res = await b.fail({ error: new UpstreamRateLimitedError('the budget is spent'), retryAfterSeconds: 7 })
  t.equal(res.status, 429)
  t.equal(res.headers['retry-after'], '7')
  t.equal(JSON.parse(res.body).error, 'UPSTREAM_RATE_LIMITED')
  t.same(b.calls, [['refused', CACHED, 7000]], 'RateLimit says the same wait as Retry-After')
})

t.test('a waiter\'s failure keeps the Retry-After its fetch was told', async (t) => {
  const b = cacheBench(t)
  const told = await b.fail({ error: new UpstreamTimeoutError(), retryAfterSeconds: 9 })
  t.equal(told.status, 504)
  t.equal(told.headers['retry-after'], '9')
  t.same(b.calls, [['withFields', CACHED]])
  const untold = await b.fail({ error: new UpstreamTimeoutError() })
  t.equal(untold.status, 504)
  t.equal(untold.headers['retry-after'], undefined)
  t.equal((await b.fail({ error: new Error('not ours') })).status, 500, 'a failure not of ours is a plain 500')
})

t.test('without RateLimit fields a waiter\'s failure is answered as it is', async (t) => {
  const b = cacheBench(t, { fields: false })
  t.equal((await b.fail(HELD)).status, 503)
  t.equal((await b.fail({ error: new UpstreamRateLimitedError('spent'), retryAfterSeconds: 2 })).headers['retry-after'], '2')
  t.same(b.calls, [])
})

t.test('the cache takes GETs of rules with cache=, once: a fill\'s replay goes to the budget', async (t) => {
  const b = cacheBench(t)
  const rules: Array<string | undefined> = []
  const take = (url: string, fill: Fill | null = null) => b.run(url, (request) => {
    request.fill = fill
    rules.push(b.stage.cacheRule(request)?.id)
  })
  await take('/v2/store/x')
  await take('/v2/other/x')
  await take('/v2/store/x', { flight: {} } as unknown as Fill)
  t.same(rules, [CACHED.id, undefined, undefined])
})

t.test('a read cache that fails: a 500, logged; a caller gone meanwhile gets nothing', async (t) => {
  const b = cacheBench(t, { find: async () => { throw new Error('store unreadable') } })
  const res = await b.ask()
  t.equal(res.status, 500)
  t.equal(JSON.parse(res.body).error, 'INTERNAL_ERROR')
  t.match(b.logs.entries().find((e) => e.msg === 'read cache failed'), { level: 50, err: { message: 'store unreadable' } })
  t.equal((await b.ask({ gone: true })).status, UNTOUCHED)
})
