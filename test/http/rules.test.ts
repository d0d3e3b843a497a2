import t from 'tap'
import { callerResponseHeaders, connectionOptions, requestHeadersProblem, requestTargetProblem, upstreamRequestHeaders } from '../../src/http/rules.js'

t.test('request headers: the caller Authorization is replaced, hop-by-hop dropped, the rest untouched', async (t) => {
  const raw = [
    'Host', 'caller.example.test',
    'Authorization', 'Basic Y2FsbGVyOnNlY3JldA==',
    'Proxy-Authorization', 'Basic eDp5',
    'Connection', 'keep-alive, X-Secret-Hop',
    'X-Secret-Hop', 'not for upstream',
    'Keep-Alive', 'timeout=5',
    'Proxy-Connection', 'keep-alive',
    'TE', 'trailers',
    'Trailer', 'x-checksum',
    'Transfer-Encoding', 'chunked',
    'Upgrade', 'websocket',
    'Expect', '100-continue',
    'Accept', 'application/json',
    'content-type', 'application/json',
    'X-Request-Id', 'abc'
  ]
  t.same(upstreamRequestHeaders(raw, 'keep-alive, X-Secret-Hop', 'api.example.test', 'Bearer t0ken', true), [
    'host', 'api.example.test',
    'authorization', 'Bearer t0ken',
    'Accept', 'application/json',
    'content-type', 'application/json',
    'X-Request-Id', 'abc'
  ])
})

t.test('request headers: repeated fields keep their order, values and spelling (Node would join or drop them)', async (t) => {
  const raw = ['User-Agent', 'a', 'x-tag', 'one', 'user-agent', 'b', 'X-Tag', 'two', 'Content-Length', '3']
  t.same(upstreamRequestHeaders(raw, undefined, 'h', 'Bearer abc', true),
    ['host', 'h', 'authorization', 'Bearer abc', 'User-Agent', 'a', 'x-tag', 'one', 'user-agent', 'b', 'X-Tag', 'two', 'Content-Length', '3'])
})

t.test('request headers: without a forwarded body, its Content-Length is not sent either', async (t) => {
  t.same(upstreamRequestHeaders(['Content-Length', '3', 'Accept', '*/*'], undefined, 'h', 'Bearer abc', false),
    ['host', 'h', 'authorization', 'Bearer abc', 'Accept', '*/*'])
})

t.test('requestHeadersProblem: a repeated Host is refused (RFC 9112 §3.2), one is fine', async (t) => {
  t.equal(requestHeadersProblem(['Host', 'a', 'Accept', '*/*']), undefined)
  t.equal(requestHeadersProblem(['Host', 'a', 'HOST', 'b']), 'the request has more than one Host header')
  t.equal(requestHeadersProblem(['Host', 'a', 'X-Host', 'b']), undefined)
})

t.test('response headers: end-to-end pass, hop-by-hop and Connection-named do not', async (t) => {
  const headers = callerResponseHeaders({
    'content-type': 'application/json',
    'set-cookie': ['a=1', 'b=2'],
    'cache-control': 'no-store',
    location: '/v2/store/orders/1',
    connection: 'close, x-internal',
    'x-internal': 'upstream-only',
    'keep-alive': 'timeout=60',
    'proxy-authenticate': 'Basic',
    'transfer-encoding': 'chunked',
    upgrade: 'h2c'
  })
  t.same(headers, {
    'content-type': 'application/json',
    'set-cookie': ['a=1', 'b=2'],
    'cache-control': 'no-store',
    location: '/v2/store/orders/1'
  })
})

t.test('Connection options are parsed as a comma list, any case, repeated headers joined', async (t) => {
  t.same(connectionOptions(' Keep-Alive ,X-A,, x-b '), ['keep-alive', 'x-a', 'x-b'])
  t.same(connectionOptions(['x-a', 'X-B']), ['x-a', 'x-b'])
  t.same(connectionOptions(undefined), [])
})

const accepted = [
  '/', '/v2/store/products/LM358BIDR?currency=USD', '/v2/store/products/%2FNOPB', '/a/.well-known/x',
  '/a/...', '/file.json', '/q?next=/../x', '/%E2%9C%93', '/a/...;x', '/a/;../b', '/a/.x;/b',
  // Percent-encoded bytes that are not UTF-8 are legal (RFC 3986 §2.1): the generative suite's find.
  '/files/%FF', '/a%80', '/%fe%ff/x'
]
const refused: Array<[string, RegExp]> = [
  ['http://evil.example/x', /origin-form/],
  ['evil.example:443', /origin-form/],
  ['*', /origin-form/],
  ['//evil.example/x', /must not start with \/\//],
  ['/a/../b', /dot-segments/],
  ['/a/./b', /dot-segments/],
  ['/..', /dot-segments/],
  ['/a/%2e%2e/b', /dot-segments/],
  ['/a/%2E%2e/b', /dot-segments/],
  ['/a/.%2e', /dot-segments/],
  ['/a%2f..%2fb', /dot-segments/],
  // Path parameters: `..;` is `..` to servers that drop them first (the review's find).
  ['/v2/store/products/..;/orders/123', /dot-segments/],
  ['/v2/store/products/.%2e;/..;/customers', /dot-segments/],
  ['/a/.;x/b', /dot-segments/],
  ['/a/..;jsessionid=1', /dot-segments/],
  ['/a/%2e%2e;/b', /dot-segments/],
  ['/a\\..\\b', /backslash/],
  ['/\\evil.example', /backslash/],
  ['/a/%5c..%5cb', /backslash/],
  ['/a/%zz', /invalid percent-encoding/],
  ['/a/%2', /invalid percent-encoding/],
  ['/a/%c0%ae%c0%ae/b', /overlong/],
  ['/a/%C1%9C', /overlong/],
  ['/a/%e0%80%ae', /overlong/],
  ['/a/%F0%80%80%AE', /overlong/]
]

t.test('request targets that are forwarded', async (t) => {
  for (const url of accepted) t.equal(requestTargetProblem(url), undefined, url)
})

t.test('request targets that are refused', async (t) => {
  for (const [url, pattern] of refused) t.match(requestTargetProblem(url), pattern, url)
})
