// The budget stage's verdicts acted on, each turn set up on the bench: a caller gone after its
// point was taken, a fill's replay, a stored answer standing in, a refusal its waiters share,
// and a guard that fails.
import t, { type Test } from 'tap'
import type { FastifyRequest } from 'fastify'
import type { Rule } from '../../src/config/rate-limit-rules.js'
import type { Entry } from '../../src/cache/entries.js'
import type { Fill } from '../../src/cache/fill.js'
import type { Ticket, Verdict } from '../../src/quota/guard.js'
import { createBudgetStage } from '../../src/proxy/stages/budget.js'
import { stageBench, UNTOUCHED, type Call } from './stage-bench.js'

const RULE = { id: 'GET /v2/store/**', limits: [] } as unknown as Rule
const TICKET: Ticket = { scope: RULE.id, limits: [], id: 'point-1' }
const ADMITTED: Verdict = { ok: true, delayed: true, ticket: TICKET }
const FOUND = { status: 200, rule: RULE.id } as unknown as Entry

function refusal (reason: 'budget' | 'degraded', retryAfterMs = 2500): Verdict {
  return { ok: false, reason, retryAfterMs, scope: RULE.id }
}

/** A fill's flight, recording what its waiters are told and what its caller is counted as when it ends. */
function fillOf (found: Entry | undefined, calls: Call[]): Fill {
  const counted = (): string => `counted ${fill.servedAs ?? 'miss'}`
  const fill = {
    rule: RULE,
    found,
    servedAs: undefined,
    flight: {
      settle: (...args: unknown[]) => { calls.push(['settle', ...args, counted()]) },
      fail: (failure: unknown) => { calls.push(['fail', failure, counted()]) },
      waiting: () => 1
    }
  } as unknown as Fill
  return fill
}

interface Turn { gone?: boolean, replayed?: boolean, fill?: boolean, found?: Entry, claim?: unknown }

function budgetBench (t: Test, { admit = (): Verdict | Promise<Verdict> => ADMITTED, standing = { usable: false, fresh: false } } = {}) {
  const bench = stageBench(t)
  const quota = {
    active: true,
    ruleFor: () => RULE,
    admit: () => admit(),
    refund: (ticket: Ticket | undefined) => { bench.calls.push(['refund', ticket]) },
    describe: (v: { retryAfterMs: number }) => ({ message: 'the budget is spent', retryAfterSeconds: Math.ceil(v.retryAfterMs / 1000) })
  }
  const cache = { standing: () => standing }
  const idempotency = { unsent: (claim: unknown) => { bench.calls.push(['unsent', claim]) } }
  const stage = createBudgetStage(bench.options({ quota, cache, idempotency } as never), bench.path)
  const setUp = (request: FastifyRequest, turn: Turn): void => {
    request.exchange.gone = turn.gone ?? false
    request.replayed = turn.replayed ?? false
    request.fill = turn.fill === true || turn.found !== undefined ? fillOf(turn.found, bench.calls) : null
    request.claim = (turn.claim ?? null) as never
  }
  return {
    ...bench,
    /** The verdict acted on for a request in this state. */
    verdict: async (verdict: Verdict, turn: Turn = {}) => await bench.run('/v2/store/x', (request, reply) => {
      setUp(request, turn)
      stage.actOnVerdict(request, reply, RULE, verdict)
    }),
    /** The guard asked for a request in this state. */
    ask: async (turn: Turn = {}) => await bench.run('/v2/store/x', (request, reply) => {
      setUp(request, turn)
      stage.askQuota(request, reply)
    })
  }
}

t.test('an admitted request is forwarded with its rule and point while its caller is there', async (t) => {
  const b = budgetBench(t)
  const res = await b.verdict(ADMITTED)
  t.equal(res.body, 'forwarded')
  t.same(b.calls, [['forward', RULE, TICKET]])
})

t.test('a caller gone once its point was taken: never sent, the point back, its waiters free', async (t) => {
  const b = budgetBench(t)
  t.equal((await b.verdict(ADMITTED, { gone: true })).status, UNTOUCHED)
  t.same(b.calls, [['refund', TICKET], ['abandon', '/v2/store/x']])

  // A replay of a request that leads no fill, or a fill's first send: nobody else waits on it.
  b.calls.length = 0
  t.equal((await b.verdict(ADMITTED, { gone: true, replayed: true })).status, UNTOUCHED, 'a replay leading no fill')
  t.equal((await b.verdict(ADMITTED, { gone: true, fill: true })).status, UNTOUCHED, 'a fill not yet replayed')
  t.same(b.names(), ['refund', 'abandon', 'refund', 'abandon'])
})

t.test('a fill\'s replay goes on for those who wait, though its caller left', async (t) => {
  const b = budgetBench(t)
  t.equal((await b.verdict(ADMITTED, { gone: true, fill: true, replayed: true })).body, 'forwarded')
  t.same(b.calls, [['forward', RULE, TICKET]], 'its point kept: it is sent')
})

t.test('refused for a caller that left: nothing answered, its waiters free', async (t) => {
  const b = budgetBench(t)
  t.equal((await b.verdict({ ok: false, reason: 'gone' }, { fill: true })).status, UNTOUCHED, 'left while it waited')
  t.equal((await b.verdict(refusal('budget'), { gone: true, fill: true })).status, UNTOUCHED, 'gone as it was refused')
  t.same(b.names(), ['abandon', 'abandon'])
  t.equal(b.logs.entries().filter((e) => e.msg === 'refused by the quota guard').length, 0)
})

t.test('a usable stored answer stands in for a refusal, for the caller and those waiting', async (t) => {
  const stale = budgetBench(t, { standing: { usable: true, fresh: false } })
  t.equal((await stale.verdict(refusal('budget'), { found: FOUND })).body, 'served')
  t.same(stale.calls, [
    ['settle', FOUND, true, 'counted stale'],
    ['serveCached', FOUND, 'GET', { hit: true, detail: 'stale-budget' }, 'stale']
  ], 'the waiters are told it stands in (stale-error), not that it is new; the caller counted stale')

  const fresh = budgetBench(t, { standing: { usable: true, fresh: true } })
  await fresh.verdict(refusal('budget'), { found: FOUND })
  t.same(fresh.calls, [
    ['settle', FOUND, true, 'counted hit'],
    ['serveCached', FOUND, 'GET', { hit: true, detail: 'no-refresh-budget' }, 'hit']
  ])
})

t.test('a refusal: a 429 with Retry-After, logged, and shared at once with the fetch\'s waiters', async (t) => {
  const b = budgetBench(t)
  const res = await b.verdict(refusal('budget'), { fill: true })
  t.equal(res.status, 429)
  t.equal(res.headers['retry-after'], '3')
  t.equal(JSON.parse(res.body).error, 'UPSTREAM_RATE_LIMITED')
  t.same(b.names(), ['fail'])
  t.equal(b.calls[0]?.[2], 'counted miss', 'counted as a miss as its flight ends')
  const failure = b.calls[0]?.[1] as Record<string, unknown>
  t.same(Object.keys(failure).sort(), ['error', 'retryAfterSeconds'], 'the fleet\'s budget: other sidecars\' waiters refused too')
  t.equal(failure.retryAfterSeconds, 3)
  const logged = b.logs.entries().find((e) => e.msg === 'refused by the quota guard')
  t.match(logged, { level: 20, rule: RULE.id, reason: 'budget', retryAfter: 3 })
})

t.test('a degraded refusal is this sidecar\'s own: other sidecars\' waiters are not refused with it', async (t) => {
  const b = budgetBench(t)
  t.equal((await b.verdict(refusal('degraded'), { fill: true })).status, 429)
  t.match(b.calls[0], ['fail', { own: true, retryAfterSeconds: 3 }])
})

t.test('a guard that fails: a 500, logged, and the request abandoned (its key free again, a fill\'s waiters sent on)', async (t) => {
  const b = budgetBench(t, { admit: async () => { throw new Error('ledger unreadable') } })
  const res = await b.ask({ claim: 'key-1' })
  t.equal(res.status, 500)
  t.equal(JSON.parse(res.body).error, 'INTERNAL_ERROR')
  t.same(b.calls, [['abandon', '/v2/store/x']])
  const logged = b.logs.entries().find((e) => e.msg === 'quota guard failed')
  t.match(logged, { level: 50, err: { message: 'ledger unreadable' } })

  b.calls.length = 0
  t.equal((await b.ask({ claim: 'key-2', gone: true })).status, UNTOUCHED, 'a caller gone meanwhile gets nothing')
  t.same(b.calls, [['abandon', '/v2/store/x']])
})

t.test('the verdict of a guard that waited is acted on once it comes', async (t) => {
  const b = budgetBench(t, { admit: async () => ADMITTED })
  t.equal((await b.ask()).body, 'forwarded')
  t.same(b.calls, [['forward', RULE, TICKET]])
})
