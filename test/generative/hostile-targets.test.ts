// Hostile request lines and heads, sent as raw bytes: malformed percent-encoding,
// CONNECT and other unforwarded methods, a duplicate Host. Each gets the sidecar's
// documented answer in its JSON shape (never echoing the target), nothing reaches
// the upstream, and the metrics and access log see it.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { pick } from './arbitraries.js'
import { checkProperty, fileBudget, nextId, ownError, setup, type Setup } from './harness.js'

interface Answered { status: number, contentType: string, body: string }

/** Answers the sidecar made itself (its JSON shape): each must have its access-log line. */
let ownAnswers = 0

async function raw (s: Setup, lines: string[]): Promise<Answered> {
  const answer = await rawRequest(s.proxyUrl, lines.join('\r\n') + '\r\n\r\n')
  const split = answer.indexOf('\r\n\r\n')
  const head = answer.slice(0, split)
  if (ownError({ body: Buffer.from(answer.slice(split + 4), 'latin1') } as never) !== undefined) ownAnswers += 1
  return {
    status: statusOf(answer),
    contentType: /\r\ncontent-type: *([^\r\n]*)/i.exec(head)?.[1] ?? '',
    body: split === -1 ? '' : answer.slice(split + 4)
  }
}

function jsonError (a: Answered, status: number, code: string): { error: string, message: string } {
  assert.equal(a.status, status, `status ${status} (got ${a.status}: ${a.body.slice(0, 200)})`)
  assert.match(a.contentType, /^application\/json/, 'in the sidecar\'s JSON shape')
  const parsed = ownError({ body: Buffer.from(a.body, 'latin1') } as never)
  assert.equal(parsed?.error, code, `error ${code} (got ${a.body.slice(0, 200)})`)
  return parsed as { error: string, message: string }
}

const HEX = '0123456789abcdefABCDEF'
const NOT_HEX = [...'gzGZ%/-_.~!x']
const segment = fc.string({ unit: fc.constantFrom(...'abcXYZ019-_~'), maxLength: 6 })
/** A path with one broken percent-encoding: `%` then fewer than two hex digits. */
const brokenPathArb = fc.tuple(segment, fc.option(fc.constantFrom(...HEX)), fc.constantFrom(...NOT_HEX, ''), segment, fc.option(segment))
  .map(([before, hex, bad, after, query]) => `/${before}%${hex ?? ''}${bad}${bad === '' ? '' : after}${query === null ? '' : '?' + query}`)
  .filter((p) => { try { decodeURIComponent(p.split('?')[0] ?? ''); return false } catch { return true } })

const UNFORWARDED = ['CONNECT', 'TRACE', 'PROPFIND', 'MKCOL', 'PURGE', 'LINK', 'SEARCH', 'QUERY']

fileBudget(t)

t.test('hostile request lines', async (t) => {
  const s = await setup(t)
  await s.baseline()

  await t.test('malformed percent-encoding: 400 BAD_REQUEST in JSON, the target not echoed, nothing forwarded', async (t) => {
    await checkProperty(t, 'malformed percent-encoding', fc.asyncProperty(brokenPathArb, pick(['GET', 'POST', 'DELETE']), async (path, method) => {
      const id = nextId('pct')
      const before = s.upstream.received.length
      const a = await raw(s, [`${method} ${path} HTTP/1.1`, 'Host: localhost', `X-Gen-Id: ${id}`, 'Content-Length: 0', 'Connection: close'])
      if (a.status !== 0) s.expect.request(method, `${Math.floor(a.status / 100)}xx`, 'completed')
      const own = ownError({ body: Buffer.from(a.body, 'latin1') } as never)
      if (own !== undefined) s.expect.error(own.error)
      const { message } = jsonError(a, 400, 'BAD_REQUEST')
      assert.ok(!message.includes(path.split('?')[0] ?? path) && !message.includes('%'), `the message does not echo the target (${message})`)
      assert.equal(s.upstream.received.length, before, 'nothing forwarded')
    }), { numRuns: 30, timeLimitMs: 5_000 })
  })

  /** Sends `method target`; expects 405 METHOD_NOT_ALLOWED naming the method, nothing forwarded. */
  async function refused (method: string, target: string): Promise<void> {
    const before = s.upstream.received.length
    const a = await raw(s, [`${method} ${target} HTTP/1.1`, 'Host: localhost', 'Content-Length: 0', 'Connection: close'])
    if (a.status !== 0) s.expect.request('OTHER', `${Math.floor(a.status / 100)}xx`, 'completed')
    const own = ownError({ body: Buffer.from(a.body, 'latin1') } as never)
    if (own !== undefined) s.expect.error(own.error)
    const { message } = jsonError(a, 405, 'METHOD_NOT_ALLOWED')
    assert.ok(message.includes(method), `the message names ${method} (${message})`)
    assert.equal(s.upstream.received.length, before, 'nothing forwarded')
  }

  await t.test('CONNECT: 405 METHOD_NOT_ALLOWED, not a silent close', async (t) => {
    // CONNECT takes an authority-form target (RFC 9110 §9.3.6).
    await checkProperty(t, 'CONNECT', fc.asyncProperty(
      fc.constantFrom('store-api.example:443', '127.0.0.1:1', 'localhost:80', '[::1]:8080'),
      async (target) => { await refused('CONNECT', target) }
    ), { numRuns: 6, timeLimitMs: 4_000 })
  })

  await t.test('other unforwarded methods: 405 METHOD_NOT_ALLOWED naming the method sent', async (t) => {
    await checkProperty(t, 'unforwarded methods', fc.asyncProperty(
      pick(UNFORWARDED.filter((m) => m !== 'CONNECT')),
      fc.constantFrom('/v2/store/orders', '/', '/v2/store/products/LM358BIDR?currency=USD'),
      async (method, target) => { await refused(method, target) }
    ), { numRuns: 14, timeLimitMs: 4_000 })
  })

  await t.test('a duplicate Host: 400, nothing forwarded (RFC 9112 §3.2)', async (t) => {
    await checkProperty(t, 'duplicate Host', fc.asyncProperty(
      pick(['GET', 'POST', 'PUT']),
      fc.constantFrom('localhost', 'store-api.example', '127.0.0.1:8080'),
      fc.constantFrom('localhost', 'evil.example', '127.0.0.1:8080'),
      fc.constantFrom('Host', 'host', 'HOST'),
      async (method, first, second, name) => {
        const before = s.upstream.received.length
        const a = await raw(s, [`${method} /v2/store/orders HTTP/1.1`, `Host: ${first}`, `${name}: ${second}`, 'Content-Length: 0', 'Connection: close'])
        // Node's parser may refuse it (a plain 400 the sidecar never sees); if the sidecar answers, it is counted.
        const own = ownError({ body: Buffer.from(a.body, 'latin1') } as never)
        if (own !== undefined) {
          s.expect.error(own.error)
          s.expect.request(method, `${Math.floor(a.status / 100)}xx`, 'completed')
        } else if (a.status === 200) {
          s.expect.request(method, '2xx', 'completed')
        }
        assert.equal(a.status, 400, `400 (got ${a.status})`)
        assert.equal(s.upstream.received.length, before, 'nothing forwarded')
      }
    ), { numRuns: 12, timeLimitMs: 5_000 })
  })

  await t.test('metrics agree with what the callers saw', async (t) => { await s.checkMetrics(t) })
  await t.test('logs', async (t) => {
    s.checkLogs(t)
    // With ACCESS_LOG on, every answered request has its access line (item 12: `/%zz` escaped it).
    const accessLines = s.logs.entries().filter((e) => e.msg === 'request').length
    t.equal(accessLines, ownAnswers, 'an access-log line for every answer the sidecar made')
  })
})
