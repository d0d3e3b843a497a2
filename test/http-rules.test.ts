import t from 'tap'
import { callerResponseHeaders, connectionOptions, requestTargetProblem, upstreamRequestHeaders } from '../src/http-rules.js'

t.test('request headers: the caller Authorization is replaced, hop-by-hop dropped, the rest untouched', async (t) => {
  const headers = upstreamRequestHeaders({
    host: 'api.example.test',
    authorization: 'Basic Y2FsbGVyOnNlY3JldA==',
    'proxy-authorization': 'Basic eDp5',
    connection: 'keep-alive, X-Secret-Hop',
    'x-secret-hop': 'not for upstream',
    'keep-alive': 'timeout=5',
    'proxy-connection': 'keep-alive',
    te: 'trailers',
    trailer: 'x-checksum',
    'transfer-encoding': 'chunked',
    upgrade: 'websocket',
    expect: '100-continue',
    accept: 'application/json',
    'content-type': 'application/json',
    'x-request-id': 'abc'
  }, 'Bearer t0ken')
  t.same(headers, {
    host: 'api.example.test',
    authorization: 'Bearer t0ken',
    accept: 'application/json',
    'content-type': 'application/json',
    'x-request-id': 'abc'
  })
})

t.test('request headers: Authorization is injected when the caller sent none', async (t) => {
  t.same(upstreamRequestHeaders({ accept: '*/*' }, 'Bearer abc'), { accept: '*/*', authorization: 'Bearer abc' })
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
  '/a/...', '/file.json', '/q?next=/../x', '/%E2%9C%93'
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
  ['/a\\..\\b', /backslash/],
  ['/\\evil.example', /backslash/],
  ['/a/%5c..%5cb', /backslash/],
  ['/a/%zz', /invalid percent-encoding/]
]

t.test('request targets that are forwarded', async (t) => {
  for (const url of accepted) t.equal(requestTargetProblem(url), undefined, url)
})

t.test('request targets that are refused', async (t) => {
  for (const [url, pattern] of refused) t.match(requestTargetProblem(url), pattern, url)
})
