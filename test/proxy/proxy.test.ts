import { request as httpRequest } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { build, startSidecar, startStandIn } from '../helpers/build.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024

t.test('the token is injected, and the caller\'s own Authorization is replaced', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/v2/store/products/LM358BIDR', {
    headers: { authorization: 'Basic Y2FsbGVyOnBhc3N3b3Jk', 'x-caller': 'svc-a' }
  })
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.equal(upstream.received.length, 1)
  const auth = upstream.received[0]?.headers.authorization
  t.match(auth, /^Bearer [A-Za-z0-9_-]{28}$/)
  t.equal(upstream.received[0]?.rawHeaders.filter((h) => h.toLowerCase() === 'authorization').length, 1, 'exactly one Authorization header')
  t.equal(upstream.received[0]?.headers['x-caller'], 'svc-a')
})

t.test('against the stand-in store API the injected token is accepted', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  const res = await request(proxyUrl + '/v2/store/products/LM358BIDR?currency=USD')
  t.equal(res.statusCode, 200)
  const product = await res.body.json() as { tiPartNumber: string, pricing: Array<{ currency: string, priceBreaks: unknown[] }> }
  t.equal(product.tiPartNumber, 'LM358BIDR')
  t.same(product.pricing.map((p) => p.currency), ['USD'])
  t.ok((product.pricing[0]?.priceBreaks.length ?? 0) > 0)
})

t.test('path bytes, query and the base path reach the upstream unchanged', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url + '/store/')
  const path = '/v2/store/products/LM358B%2FNOPB/x%20y;v=1?currency=USD&q=a+b&r=%7e%2F&r=2&empty='
  const res = await request(proxyUrl + path)
  await res.body.dump()
  t.equal(res.statusCode, 200)
  t.equal(upstream.received[0]?.url, '/store' + path)
})

t.test('every forwarded method, with its body', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  for (const method of ['GET', 'HEAD', 'DELETE', 'OPTIONS', 'PATCH', 'POST', 'PUT'] as const) {
    const hasBody = method !== 'GET' && method !== 'HEAD'
    const res = await request(`${proxyUrl}/m/${method}`, {
      method,
      ...(hasBody ? { body: `{"m":"${method}"}`, headers: { 'content-type': 'application/json' } } : {})
    })
    await res.body.dump()
    t.equal(res.statusCode, 200, method)
    const seen = upstream.received.at(-1)
    t.equal(seen?.method, method)
    t.equal(seen?.url, `/m/${method}`)
    if (hasBody) t.equal(seen?.body.toString(), `{"m":"${method}"}`, `${method} body unchanged`)
  }
})

t.test('status codes and end-to-end headers pass through untouched; hop-by-hop do not', async (t) => {
  const upstream = await startUpstream(t, (req, res) => {
    const status = Number(req.url?.slice(1))
    res.writeHead(status, {
      'x-upstream': 'yes',
      'set-cookie': ['a=1', 'b=2'],
      location: '/elsewhere',
      'retry-after': '7',
      connection: 'x-hop',
      'x-hop': 'hidden',
      'keep-alive': 'timeout=1'
    })
    res.end(status === 204 || status === 304 ? undefined : `status ${status}`)
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  // 429 last: it starts a cool-down, and the requests after it would be answered locally.
  for (const status of [200, 201, 204, 302, 400, 404, 409, 418, 500, 502, 503, 429]) {
    const res = await request(`${proxyUrl}/${status}`)
    const body = await res.body.text()
    t.equal(res.statusCode, status)
    t.equal(res.headers['x-upstream'], 'yes')
    t.same(res.headers['set-cookie'], ['a=1', 'b=2'])
    t.equal(res.headers.location, '/elsewhere')
    t.equal(res.headers['retry-after'], '7')
    t.equal(res.headers['x-hop'], undefined, 'a header named in Connection is not forwarded')
    if (status !== 204) t.equal(body, `status ${status}`)
  }
  t.equal(upstream.received.length, 12, 'no retries, not even of the 502 and 503 answers')
})

t.test('the request Host is the upstream\'s and hop-by-hop request headers are dropped', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const answer = await rawRequest(proxyUrl, 'GET /h HTTP/1.1\r\nHost: localhost\r\nConnection: close, X-Hop\r\n' +
    'X-Hop: x\r\nProxy-Authorization: Basic eDp5\r\nKeep-Alive: timeout=5\r\nX-End-To-End: kept\r\n\r\n')
  t.equal(statusOf(answer), 200)
  const seen = upstream.received[0]?.headers
  t.equal(seen?.host, new URL(upstream.url).host)
  t.equal(seen?.['x-hop'], undefined)
  t.equal(seen?.['proxy-authorization'], undefined)
  t.equal(seen?.['keep-alive'], undefined)
  t.equal(seen?.['x-end-to-end'], 'kept')
})

t.test('a large upload streams: the upstream sees bytes before the caller has finished sending', async (t) => {
  let upstreamBytes = 0
  let notify: () => void = () => {}
  const firstBytes = new Promise<void>((resolve) => { notify = resolve })
  const upstream = await startUpstream(t, (req, res) => {
    req.on('data', (chunk: Buffer) => { upstreamBytes += chunk.length; notify() })
    req.on('end', () => { res.end(JSON.stringify({ bytes: upstreamBytes })) })
  }, { streaming: true })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const total = 64 * MiB
  const chunk = Buffer.alloc(MiB, 7)
  const answer = new Promise<string>((resolve, reject) => {
    const req = httpRequest(proxyUrl + '/upload', { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'content-length': total } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => { body += c })
      res.on('end', () => { resolve(body) })
    })
    req.on('error', reject)
    req.write(chunk)
    // Only once the upstream has bytes does the caller send the rest.
    firstBytes.then(() => {
      for (let sent = MiB; sent < total; sent += MiB) req.write(chunk)
      req.end()
    }, reject)
  })
  t.same(JSON.parse(await answer), { bytes: total })
})

t.test('a large download streams: the caller sees bytes before the upstream has finished sending', async (t) => {
  const total = 64 * MiB
  let release: () => void = () => {}
  const released = new Promise<void>((resolve) => { release = resolve })
  const upstream = await startUpstream(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': total })
    res.write(Buffer.alloc(MiB, 1))
    void released.then(() => {
      for (let sent = MiB; sent < total; sent += MiB) res.write(Buffer.alloc(MiB, 1))
      res.end()
    })
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/download')
  let received = 0
  for await (const chunk of res.body) {
    if (received === 0) release()
    received += (chunk as Buffer).length
  }
  t.equal(received, total)
})

t.test('no token can be had: 503 JSON with Retry-After, and nothing reaches the upstream', async (t) => {
  const upstream = await startUpstream(t)
  const closed = await startUpstream(t)
  await new Promise<void>((resolve) => closed.server.close(() => { resolve() }))
  const { proxyUrl } = await build(t, { AUTH_URL: closed.url, UPSTREAM_URL: upstream.url, TOKEN_WAIT_MS: '200' })
  const res = await request(proxyUrl + '/v2/store/products/LM358BIDR')
  t.equal(res.statusCode, 503)
  t.match(res.headers['content-type'], /^application\/json/)
  t.match(res.headers['retry-after'], /^\d+$/)
  t.same(await res.body.json(), { error: 'TOKEN_UNAVAILABLE', message: 'no valid access token is available; retry later' })
  t.equal(upstream.received.length, 0)
})

t.test('an unreachable upstream: 502 JSON that reveals no address', async (t) => {
  const closed = await startUpstream(t)
  await new Promise<void>((resolve) => closed.server.close(() => { resolve() }))
  const { proxyUrl } = await startSidecar(t, closed.url)
  const res = await request(proxyUrl + '/x')
  const text = await res.body.text()
  t.equal(res.statusCode, 502)
  t.same(JSON.parse(text), { error: 'UPSTREAM_UNREACHABLE', message: 'the upstream could not be reached' })
  t.notMatch(text, '127.0.0.1')
  t.notMatch(text, String(closed.port))
})

t.test('an upstream that does not answer within UPSTREAM_TIMEOUT_MS: 504', async (t) => {
  const upstream = await startUpstream(t, () => { /* never answers */ })
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_TIMEOUT_MS: '300' })
  const started = Date.now()
  const res = await request(proxyUrl + '/slow')
  t.equal(res.statusCode, 504)
  t.same(await res.body.json(), { error: 'UPSTREAM_TIMEOUT', message: 'the upstream did not answer in time' })
  t.ok(Date.now() - started < 5000)
  t.equal(upstream.received.length, 1, 'not retried')
})

t.test('the proxy port serves no admin route: /metrics, /livez and /readyz go upstream', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  for (const path of ['/metrics', '/livez', '/readyz']) {
    const res = await request(proxyUrl + path)
    t.same(await res.body.json(), { method: 'GET', url: path, bytes: 0 }, path)
  }
})

t.test('300 concurrent callers on a cold sidecar: one token request, 300 successes', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }, {}, { start: false })
  const statuses = await Promise.all(Array.from({ length: 300 }, async () => {
    const res = await request(proxyUrl + '/v2/store/products/LM358BIDR')
    await res.body.dump()
    return res.statusCode
  }))
  t.equal(standIn.tokensIssued(), 1)
  t.equal(statuses.filter((s) => s === 200).length, 300)
})

t.test('TRACE is refused: the upstream would echo the injected token back', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/x', { method: 'TRACE' })
  t.equal(res.statusCode, 405)
  t.same(await res.body.json(), { error: 'METHOD_NOT_ALLOWED', message: 'the TRACE method is not forwarded' })
  t.equal(upstream.received.length, 0)
})
