// Where the features meet, case 5: a fetch that fails (TI hanging past UPSTREAM_TIMEOUT_MS, a 5xx, a 404, a
// cut) answers every caller waiting for it with its failure, at once: no caller waits one fetch
// per waiter ahead of it (cut off at IDLE_TIMEOUT_MS with no status line), and TI gets no extra
// request per waiter while it fails.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { eventually } from '../helpers/eventually.js'
import { ONE_FETCH_ENV, cacheSidecar, catalogBody, inFlight, startTi, type CacheSidecar, type Ti, type TiAnswer } from '../cache/fixture.js'

const PATH = '/v2/store/a'
const ENV = ONE_FETCH_ENV

interface Got { status: number | 'no status line', body: string, doneAt: number }

async function get (s: CacheSidecar): Promise<Got> {
  try {
    const res = await request(s.proxyUrl + PATH)
    return { status: res.statusCode, body: await res.body.text(), doneAt: performance.now() }
  } catch {
    return { status: 'no status line', body: '', doneAt: performance.now() }
  }
}

/** One leader held at TI, five callers waiting for its fetch; then TI does `fail` (nothing: it hangs). */
async function sixCallers (t: Test, ti: Ti, s: CacheSidecar, fail: TiAnswer | undefined): Promise<Got[]> {
  ti.hold()
  const leader = get(s)
  await eventually(t, 'the fetch held at TI', () => ti.waiting() === 1)
  const waiters = Array.from({ length: 5 }, async () => await get(s))
  await inFlight(t, s, 6)
  if (fail !== undefined) {
    ti.answer(() => fail)
    ti.release()
  }
  return [await leader, ...await Promise.all(waiters)]
}

t.test('case 5: TI hanging, 6 callers of one cached key: all get 504 within one fetch\'s time; TI gets one request', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, ENV)
  const answers = await sixCallers(t, ti, s, undefined)
  t.same(answers.map((a) => a.status), [504, 504, 504, 504, 504, 504], 'every caller got a status line')
  t.ok(answers.every((a) => a.body.includes('UPSTREAM_TIMEOUT')))
  // Answered with the leader, not one UPSTREAM_TIMEOUT_MS (3 s) after another.
  const after = answers.map((a) => Math.round(a.doneAt - answers[0]!.doneAt))
  t.ok(after.every((ms) => ms < 1_500), `the waiters answered with the leader (${after.join(', ')} ms after it)`)
  t.equal(ti.received.length, 1, 'TI got no extra request per waiter')
})

const failures: Array<[string, TiAnswer, number, string]> = [
  ['a 404', { status: 404, headers: { 'content-type': 'text/plain' }, body: 'no such product' }, 404, 'no such product'],
  ['a 500', { status: 500, body: 'broken' }, 500, 'broken'],
  ['a 503 with Retry-After', { status: 503, headers: { 'retry-after': '30' }, body: 'busy' }, 503, 'busy'],
  ['a cut mid-answer', { status: 200, body: catalogBody(), cutAfter: 100 }, 502, 'UPSTREAM_']
]
for (const [name, fail, status, body] of failures) {
  t.test(`case 5: TI answers ${name}: the fetch's 6 callers all get it at once; TI gets one request`, async (t) => {
    const ti = await startTi(t)
    const s = await cacheSidecar(t, ti, ENV)
    const answers = await sixCallers(t, ti, s, fail)
    t.same(answers.map((a) => a.status), answers.map(() => status))
    t.ok(answers.every((a) => a.body.includes(body)), 'each with the failure\'s body')
    t.equal(ti.received.length, 1, 'TI got one request')
    // Nothing was stored: the next caller fetches anew.
    ti.answer(() => ({ status: 200, body: 'now' }))
    t.equal((await get(s)).body, 'now')
  })
}

t.test('case 5: the fetch is refused by the budget: its waiters are refused with it at once, not one budget wait each', async (t) => {
  const ti = await startTi(t)
  const s = await cacheSidecar(t, ti, { ...ENV, RATE_LIMITS: 'GET /v2/store/** 1/1h cache=1m' })
  await s.get('/v2/store/b')
  // The budget is spent; the leader waits for its point (RATE_LIMIT_MAX_WAIT_MS), refused.
  const answers = await Promise.all(Array.from({ length: 6 }, async () => await get(s)))
  t.same(answers.map((a) => a.status), [429, 429, 429, 429, 429, 429])
  t.equal(ti.received.length, 1)
})
