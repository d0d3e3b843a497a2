// MAX_HEADER_COUNT (every listener bounded, case 2): a request with more header fields than the cap gets 431,
// never served with fields silently dropped (Node's maxHeadersCount alone drops them), whatever
// the count's place among the batches of 32 in which Node's parser hands fields to JavaScript.
import fc from 'fast-check'
import t from 'tap'
import { headerCost, headOverflowError, HEADER_COPIES, HEADER_STRING_OVERHEAD_BYTES } from '../../src/overload/admission.js'
import { loadConfig } from '../../src/config/load.js'
import { startSidecar } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

/** A GET with `count` header fields in all, Host included. */
const head = (count: number): string =>
  `GET /v2/store/h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${Array.from({ length: count - 2 }, (_, i) => `x${i}: ${i}\r\n`).join('')}\r\n`

t.test('MAX_HEADER_COUNT: default 100, 16 to 2000', async (t) => {
  const base = { CLIENT_ID: 'a', CLIENT_SECRET: 'b', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  t.equal(loadConfig(base).listener.maxHeaderCount, 100)
  t.throws(() => loadConfig({ ...base, MAX_HEADER_COUNT: '15' }), /MAX_HEADER_COUNT: must be at least 16/)
  t.throws(() => loadConfig({ ...base, MAX_HEADER_COUNT: '2001' }), /MAX_HEADER_COUNT: must be at most 2000/)
})

t.test('a head Node refused as too large: 431 for its field count only past MAX_HEADER_COUNT lines, counted as far as that', async (t) => {
  const lines = (n: number): Buffer => Buffer.from(`GET / HTTP/1.1\r\n${'a:b\r\n'.repeat(n)}`)
  for (const cap of [16, 100]) {
    t.equal(headOverflowError(lines(cap), cap, 8192).statusCode, 431)
    t.match(headOverflowError(lines(cap), cap, 8192).message, /exceeds|large|bytes/, `${cap} fields at a cap of ${cap}: the size broke`)
    t.match(headOverflowError(lines(cap + 1), cap, 8192).message, `more than ${cap} header fields`, `${cap + 1} fields: the count`)
    t.match(headOverflowError(lines(930), cap, 8192).message, `more than ${cap} header fields`, '930 fields: the count')
  }
  t.match(headOverflowError(undefined, 100, 8192).message, /exceeds|large|bytes/, 'no head: the size')
})

t.test('what a request\'s header fields are counted for', async (t) => {
  t.equal(headerCost([]), 0)
  t.equal(headerCost(['Host', 'x']), HEADER_COPIES * (5 + 2 * HEADER_STRING_OVERHEAD_BYTES))
})

t.test('at the cap served whole; one over, 431 and nothing upstream; at every batch boundary', async (t) => {
  const upstream = await startUpstream(t)
  for (const cap of [16, 32, 64, 100]) {
    const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url, { MAX_HEADER_COUNT: String(cap) })
    for (const count of new Set([cap - 1, cap, cap + 1, cap + 2, 32, 33, 64, 65, 96, 97, 128, 129, 2 * cap, 930])) {
      const before = upstream.received.length
      const answer = await rawRequest(proxyUrl, head(count), 5000)
      if (count <= cap) {
        t.equal(statusOf(answer), 200, `cap ${cap}, ${count} fields: served`)
        t.equal(upstream.received.at(-1)?.headers[`x${count - 3}`], String(count - 3), `cap ${cap}, ${count} fields: the last one reached the upstream`)
      } else {
        t.equal(statusOf(answer), 431, `cap ${cap}, ${count} fields: 431`)
        t.match(answer, `{"error":"HEADERS_TOO_LARGE","message":"the request has more than ${cap} header fields"}`, `cap ${cap}, ${count} fields: said so`)
        t.equal(upstream.received.length, before, `cap ${cap}, ${count} fields: nothing upstream`)
      }
    }
    t.ok(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'HEADERS_TOO_LARGE' }) > 0, 'counted')
  }
})

t.test('any count against any cap: 431 exactly when over it', async (t) => {
  const upstream = await startUpstream(t)
  const sidecars = new Map<number, string>()
  await fc.assert(fc.asyncProperty(fc.constantFrom(16, 31, 32, 33, 63, 100, 200), fc.integer({ min: 2, max: 400 }), async (cap, count) => {
    let url = sidecars.get(cap)
    if (url === undefined) {
      url = (await startSidecar(t, upstream.url, { MAX_HEADER_COUNT: String(cap) })).proxyUrl
      sidecars.set(cap, url)
    }
    const status = statusOf(await rawRequest(url, head(count), 5000))
    return status === (count > cap ? 431 : 200)
  }), { numRuns: 60 })
})
