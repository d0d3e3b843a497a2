// Misbehaving upstreams: for each kind of misbehaviour, generated requests and
// generated details of the misbehaviour, and what the caller must get:
// the upstream's own early answer; a truncated answer never passed off as complete;
// 502/504 with the documented codes; interim answers that neither defeat
// UPSTREAM_TIMEOUT_MS nor break the final answer; a 401 replayed at most once, with
// another token, or the upstream's 401 given back. Always: a status line for every
// caller, nothing sent twice, metrics that count what callers saw.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { call, headerMap, type CallerResult } from '../helpers/caller.js'
import { REPLAY_BODY_MAX_BYTES } from '../../src/proxy/plugin.js'
import { APIGEE_401, type Answer, type Behaviour, type Recorded } from '../helpers/recording-upstream.js'
import { BODY_METHODS, bodyOf, METHODS, pick, requestCaseArb, toCallerRequest, type BodySpec, type RequestCase } from './arbitraries.js'
import { checkProperty, createLabels, fileBudget, describe, nextId, ownError, setup, statusClass, type Setup } from './harness.js'

const UPSTREAM_TIMEOUT_MS = 1000
// The caller must have its answer well before this (the sidecar's idle timeout would close it).
const SLACK_MS = 1500

/**
 * Sends one request to an upstream that behaves as planned. `headCode`: the error
 * code the sidecar is expected to answer with, counted for a HEAD request, whose
 * answer has no body to read it from.
 */
async function send (s: Setup, c: RequestCase, behaviour: Behaviour, headCode?: string): Promise<{ result: CallerResult, seen: Recorded[] }> {
  const id = nextId('m')
  s.upstream.plan(id, behaviour)
  const result = await call(s.proxyUrl, toCallerRequest(c, id), { timeoutMs: 10_000 })
  // Count what the caller saw before judging it, so the metrics check covers failed runs too.
  const code = c.method === 'HEAD' && result.status !== undefined && result.status >= 500 ? headCode : ownError(result)?.error
  if (result.status !== undefined && code !== undefined) s.expect.error(code)
  if (result.status !== undefined) s.expect.request(c.method, statusClass(result.status), result.complete ? 'completed' : 'truncated')
  assert.ok(result.status !== undefined, `the caller got a status line (${describe(result)})`)
  const seen = s.upstream.seen(id)
  assert.ok(seen.length <= 1 || behaviour.kind === 'unauthorized', `sent upstream at most once (${seen.length} times)`)
  return { result, seen }
}

function ownAnswer (c: RequestCase, result: CallerResult, status: number, code: string): void {
  assert.equal(result.status, status, `status ${status} ${code} (${describe(result)}: ${result.body.toString('utf8').slice(0, 200)})`)
  // An answer to HEAD has no body (RFC 9110 §9.3.2): its head is all there is to check.
  if (c.method === 'HEAD') {
    assert.match(headerMap(result.rawHeaders).get('content-type')?.[0] ?? '', /^application\/json/, 'the sidecar\'s JSON error head')
    return
  }
  assert.equal(ownError(result)?.error, code, `the documented error code (got ${ownError(result)?.error ?? 'none'})`)
}

const smallRequest = requestCaseArb({ methods: METHODS, body: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 64 }).map((bytes): BodySpec => ({ bytes })) })

const answerOf = (body: string, status = 200): Answer => ({ status, headers: [['Content-Type', 'application/json']], body: Buffer.from(body), framing: 'length' })

const INVALID: Record<string, string> = {
  'a control byte in a header value': 'HTTP/1.1 200 OK\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nok',
  'a space in a header name': 'HTTP/1.1 200 OK\r\nBad Header: x\r\nContent-Length: 2\r\n\r\nok',
  'bare LF line ends': 'HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok',
  'an HTTP/0.9-style answer': 'hello, no status line here\r\n',
  'a head over 16 KiB': `HTTP/1.1 200 OK\r\nX-Big: ${'a'.repeat(17_000)}\r\nContent-Length: 2\r\n\r\nok`,
  'an unsolicited 101': 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n',
  'status 099': 'HTTP/1.1 099 Nope\r\nContent-Length: 2\r\n\r\nok',
  'two different Content-Lengths': 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok'
}

fileBudget(t)

t.test('misbehaving upstreams', async (t) => {
  const s = await setup(t, { UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS), IDLE_TIMEOUT_MS: '7000', TOKEN_WAIT_MS: '5000', UPSTREAM_QUEUE_TIMEOUT_MS: '500' })
  await s.baseline()

  await t.test('an early answer (413 before the body is read) reaches the caller every time', async (t) => {
    const labels = createLabels()
    await checkProperty(t, 'early answer', fc.asyncProperty(
      requestCaseArb({ methods: BODY_METHODS, body: fc.record({ size: fc.integer({ min: 256 * 1024, max: 3 * 1024 * 1024 }), seed: fc.nat() }) }),
      fc.constantFrom('close', 'drain') as fc.Arbitrary<'close' | 'drain'>,
      async (c, then) => {
        const answer = answerOf('{"error":"too large for us"}', 413)
        const { result, seen } = await send(s, { ...c, expectContinue: false }, { kind: 'early', answer, then })
        assert.equal(result.status, 413, `the upstream's 413 (${describe(result)})`)
        assert.ok(result.body.equals(answer.body), 'with its body')
        // The case this is for: the answer came while the upload was under way, and the
        // upstream closed without reading the rest.
        assert.ok(await s.settled(t), 'the sidecar counted the request')
        if (seen.length === 1 && (seen[0]?.body().length ?? 0) < bodyOf(c.body).length) labels.add('the upload cut short by the answer')
      }
    ), { numRuns: 8, timeLimitMs: 8_000, atLeast: { labels, counts: { 'the upload cut short by the answer': 4 } } })
  })

  await t.test('a connection cut or reset mid-answer: a truncated answer is never passed off as complete', async (t) => {
    await checkProperty(t, 'cut mid-answer', fc.asyncProperty(
      smallRequest,
      fc.constantFrom('length', 'chunked', 'close') as fc.Arbitrary<'length' | 'chunked' | 'close'>,
      fc.constantFrom('fin', 'reset') as fc.Arbitrary<'fin' | 'reset'>,
      fc.integer({ min: 1, max: 200_000 }),
      async (c, framing, how, sendBytes) => {
        const { result } = await send(s, { ...c, method: c.method === 'HEAD' ? 'GET' : c.method }, { kind: 'cut', framing, how, sendBytes })
        assert.equal(result.status, 200)
        if (framing === 'close' && how === 'fin') {
          assert.equal(result.complete, true, 'a close-delimited answer ended by FIN is complete')
          assert.equal(result.body.length, sendBytes)
        } else {
          assert.equal(result.complete, false, `the caller sees an incomplete answer (${describe(result)})`)
          assert.ok(result.body.length <= sendBytes)
        }
      }
    ), { numRuns: 16, timeLimitMs: 8_000 })
  })

  await t.test('a head, then the connection lost before the first body byte: the caller gets a status line', async (t) => {
    await checkProperty(t, 'cut after the head', fc.asyncProperty(
      smallRequest,
      fc.constantFrom('length', 'chunked', 'close') as fc.Arbitrary<'length' | 'chunked' | 'close'>,
      fc.constantFrom('fin', 'reset') as fc.Arbitrary<'fin' | 'reset'>,
      async (c, framing, how) => {
        // The 200 head arrived; whether the caller then sees that 200 cut short or a 502,
        // it must see a status line (send() checks) and never a complete 200.
        const { result } = await send(s, { ...c, method: c.method === 'HEAD' ? 'GET' : c.method }, { kind: 'cut', framing, how, sendBytes: 0 })
        if (result.status === 200) assert.equal(result.complete, framing === 'close' && how === 'fin', `complete only if a FIN ended a close-delimited answer (${describe(result)})`)
        else assert.equal(result.status, 502, describe(result))
      }
    ), { numRuns: 8, timeLimitMs: 3_000 })
  })

  await t.test('a reset before any answer: 502 UPSTREAM_UNREACHABLE, sent once', async (t) => {
    await checkProperty(t, 'reset', fc.asyncProperty(smallRequest, async (c) => {
      const { result, seen } = await send(s, c, { kind: 'reset' }, 'UPSTREAM_UNREACHABLE')
      ownAnswer(c, result, 502, 'UPSTREAM_UNREACHABLE')
      assert.equal(seen.length, 1, 'not retried')
    }), { numRuns: 8, timeLimitMs: 3_000 })
  })

  await t.test('silence: 504 UPSTREAM_TIMEOUT after UPSTREAM_TIMEOUT_MS', async (t) => {
    await checkProperty(t, 'stall', fc.asyncProperty(smallRequest, async (c) => {
      const { result } = await send(s, c, { kind: 'stall' }, 'UPSTREAM_TIMEOUT')
      ownAnswer(c, result, 504, 'UPSTREAM_TIMEOUT')
      assert.ok(result.elapsedMs >= UPSTREAM_TIMEOUT_MS - 50 && result.elapsedMs < UPSTREAM_TIMEOUT_MS + SLACK_MS, `after about UPSTREAM_TIMEOUT_MS (${Math.round(result.elapsedMs)} ms)`)
    }), { numRuns: 3, timeLimitMs: 6_000 })
  })

  await t.test('interim answers (103 Early Hints, an unexpected 100 Continue) then a final answer: the final answer passes', async (t) => {
    // RFC 9110 §15.2: a client must accept 1xx answers it did not expect. undici's HTTP/1.1
    // client refuses an unexpected 100 by design (README, Error answers): that one is a
    // documented 502 UPSTREAM_BAD_RESPONSE, never anything else.
    await checkProperty(t, 'interim then final', fc.asyncProperty(
      smallRequest,
      fc.constantFrom(103, 100) as fc.Arbitrary<103 | 100>,
      fc.integer({ min: 1, max: 3 }),
      fc.integer({ min: 20, max: 300 }),
      async (c, code, count, everyMs) => {
        const answer = answerOf('{"final":true}')
        const { result } = await send(s, c, { kind: 'interim', code, count, everyMs, final: answer }, 'UPSTREAM_BAD_RESPONSE')
        if (code === 100) {
          ownAnswer(c, result, 502, 'UPSTREAM_BAD_RESPONSE')
          return
        }
        assert.equal(result.status, 200, `the final answer after ${count} × ${code} (${describe(result)}: ${result.body.toString('utf8').slice(0, 120)})`)
        if (c.method !== 'HEAD') assert.ok(result.body.equals(answer.body), 'with its body')
      }
    ), { numRuns: 10, timeLimitMs: 5_000 })
  })

  await t.test('interim answers and no final answer: 504 UPSTREAM_TIMEOUT after UPSTREAM_TIMEOUT_MS, not later', async (t) => {
    await checkProperty(t, 'interim, no final', fc.asyncProperty(
      smallRequest,
      fc.constantFrom(103, 100) as fc.Arbitrary<103 | 100>,
      fc.oneof(fc.integer({ min: 1, max: 3 }), fc.constant('forever' as const)),
      fc.integer({ min: 150, max: 700 }),
      async (c, code, count, everyMs) => {
        const { result } = await send(s, c, { kind: 'interim', code, count, everyMs, final: null }, code === 100 ? 'UPSTREAM_BAD_RESPONSE' : 'UPSTREAM_TIMEOUT')
        if (code === 100) ownAnswer(c, result, 502, 'UPSTREAM_BAD_RESPONSE')
        else ownAnswer(c, result, 504, 'UPSTREAM_TIMEOUT')
        assert.ok(result.elapsedMs < UPSTREAM_TIMEOUT_MS + SLACK_MS, `interim answers do not extend UPSTREAM_TIMEOUT_MS (${Math.round(result.elapsedMs)} ms)`)
      }
    ), { numRuns: 5, timeLimitMs: 8_000 })
  })

  await t.test('invalid HTTP from the upstream: 502 UPSTREAM_BAD_RESPONSE', async (t) => {
    await checkProperty(t, 'invalid answer', fc.asyncProperty(smallRequest, pick(Object.keys(INVALID)), async (c, kind) => {
      const { result } = await send(s, c, { kind: 'invalid', bytes: Buffer.from(INVALID[kind] ?? '', 'latin1') }, 'UPSTREAM_BAD_RESPONSE')
      ownAnswer(c, result, 502, 'UPSTREAM_BAD_RESPONSE')
    }), { numRuns: 16, timeLimitMs: 4_000 })
  })

  await t.test('a 401: replayed once with another token when it can be, else the upstream\'s 401 to the caller; the token is kept', async (t) => {
    const labels = createLabels()
    await checkProperty(t, '401', fc.asyncProperty(
      requestCaseArb({
        methods: METHODS,
        body: fc.oneof(fc.constant<BodySpec>({ bytes: [1, 2, 3] }), fc.record({ size: fc.integer({ min: 64 * 1024 - 2, max: 64 * 1024 + 2 }), seed: fc.nat() }))
      }).map((c) => ({ ...c, contentType: 'application/octet-stream' })),
      fc.boolean(),
      async (c, tokenEndpointDown) => {
        // A sidecar of its own for each run: forced refreshes are rate-limited (one per 10 s),
        // so only the first 401 of a sidecar shows what a 401 does to the held token.
        const own = await setup(t, { UPSTREAM_TIMEOUT_MS: String(UPSTREAM_TIMEOUT_MS), TOKEN_WAIT_MS: '1000', UPSTREAM_QUEUE_TIMEOUT_MS: '500', IDLE_TIMEOUT_MS: '3000' })
        try {
          own.tokenEndpoint.setDown(tokenEndpointDown)
          const answer = answerOf('{"replayed":true}')
          const { result, seen } = await send(own, c, { kind: 'unauthorized', answer })
          // README, "A 401 from the upstream": replayed once with a new token when one comes
          // and the body was kept (none — a GET's or HEAD's is not forwarded — or up to 64 KiB
          // with a Content-Length); else the 401 is passed on.
          const size = bodyOf(c.body).length
          const bodyless = c.method === 'GET' || c.method === 'HEAD' || (size === 0 && c.framing !== 'chunked')
          const replayable = !tokenEndpointDown && (bodyless || (c.framing === 'length' && size <= REPLAY_BODY_MAX_BYTES))
          labels.add(replayable ? 'replayable' : tokenEndpointDown ? 'token endpoint down' : 'body streamed')
          assert.equal(seen.length, replayable ? 2 : 1, `${replayable ? 'replayed once' : 'not replayed'} (${size} bytes, ${c.framing}, token endpoint ${tokenEndpointDown ? 'down' : 'up'}): sent ${seen.length} time(s)`)
          if (seen.length === 2) {
            const [first, second] = seen.map((r) => r.rawHeaders[r.rawHeaders.findIndex((h) => h.toLowerCase() === 'authorization') + 1])
            assert.notEqual(first, second, 'the replay carries another token')
            const sent = c.method === 'GET' || c.method === 'HEAD' ? Buffer.alloc(0) : bodyOf(c.body)
            assert.ok(seen[1]?.body().equals(sent), 'the replay carries the same body')
            assert.equal(result.status, 200, `the replay's answer (${describe(result)})`)
          } else {
            assert.equal(result.status, 401, `no replay: the upstream's own 401 (${describe(result)}: ${result.body.toString('utf8').slice(0, 120)})`)
            if (c.method !== 'HEAD') assert.ok(result.body.equals(APIGEE_401.body), "with the upstream's body")
          }
          // The token held before the 401 is still valid for other requests.
          const after = await call(own.proxyUrl, toCallerRequest({ ...c, method: 'GET', body: { bytes: [] }, framing: 'none', expectContinue: false }, nextId('m-after')))
          assert.equal(after.status, 200, `the next request still has a token (${describe(after)}: ${after.body.toString('utf8').slice(0, 120)})`)
          own.checkLogs(t)
        } finally {
          own.tokenEndpoint.setDown(false)
        }
      }
    ), { numRuns: 12, timeLimitMs: 10_000, atLeast: { labels, counts: { replayable: 3, 'token endpoint down': 3 } } })
  })

  await t.test('metrics agree with what the callers saw', async (t) => { await s.checkMetrics(t) })
  await t.test('logs', async (t) => { s.checkLogs(t) })
})
