import { request as httpRequest } from 'node:http'
import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

/** What a plain HTTP client sees: the status, the bytes, and whether the body ended cleanly. */
async function fetchRaw (url: string): Promise<{ status: number, bytes: number, complete: boolean }> {
  return await new Promise((resolve) => {
    const req = httpRequest(url, (res) => {
      let bytes = 0
      res.on('data', (c: Buffer) => { bytes += c.length })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, bytes, complete: res.complete }) })
      res.on('error', () => { resolve({ status: res.statusCode ?? 0, bytes, complete: false }) })
      res.on('aborted', () => { resolve({ status: res.statusCode ?? 0, bytes, complete: false }) })
    })
    req.on('error', () => { resolve({ status: 0, bytes: 0, complete: false }) })
    req.end()
  })
}

for (const framing of ['content-length', 'chunked'] as const) {
  t.test(`connection lost mid-response (${framing}): the caller's connection is closed, never a truncated body passed off as complete`, async (t) => {
    const upstream = await startUpstream(t, (_req, res) => {
      res.writeHead(200, framing === 'chunked' ? { 'content-type': 'application/octet-stream' } : { 'content-length': 1_000_000 })
      res.write(Buffer.alloc(100_000, 1))
      setTimeout(() => { res.socket?.destroy() }, 50)
    })
    const { proxyUrl } = await startSidecar(t, upstream.url)
    const got = await fetchRaw(proxyUrl + '/big')
    t.equal(got.status, 200)
    t.equal(got.complete, false, 'the caller sees an incomplete body')
    t.ok(got.bytes < 1_000_000)
  })
}

t.test('a body that stalls past UPSTREAM_TIMEOUT_MS: the caller\'s connection is closed', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => {
    res.writeHead(200, { 'content-length': 10 })
    res.write('12345')
  })
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_TIMEOUT_MS: '300' })
  const got = await fetchRaw(proxyUrl + '/stall')
  t.equal(got.complete, false)
  t.equal(got.bytes, 5)
})

t.test('a reset before the answer: 502, and the request is not retried', async (t) => {
  const upstream = await startUpstream(t, (req) => { req.socket.destroy() })
  const { proxyUrl, logs } = await startSidecar(t, upstream.url)
  for (const method of ['GET', 'PUT'] as const) {
    const res = await request(proxyUrl + '/reset', { method, ...(method === 'PUT' ? { body: 'x' } : {}) })
    t.equal(res.statusCode, 502, method)
    t.same(await res.body.json(), { error: 'UPSTREAM_UNREACHABLE', message: 'the upstream could not be reached' })
  }
  t.equal(upstream.received.length, 2, 'one upstream attempt per request')
  const warnings = logs.entries().filter((e) => e.msg === 'upstream request failed')
  t.equal(warnings.length, 2, 'one warning per failed request')
  t.equal(new Set(warnings.map((e) => e.reqId)).size, 2, 'each names its request')
})

t.test('keep-alive connections to the upstream are reused', async (t) => {
  const upstream = await startUpstream(t)
  let connections = 0
  upstream.server.on('connection', () => { connections += 1 })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  for (let i = 0; i < 20; i++) {
    const res = await request(proxyUrl + `/k/${i}`)
    await res.body.dump()
  }
  t.equal(upstream.received.length, 20)
  t.equal(connections, 1)
})

t.test('an interim 103 answer is skipped; the final answer passes through', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => {
    res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' })
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.end('final')
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/hints')
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'final')
})

t.test('a caller that goes away mid-answer aborts the upstream request', async (t) => {
  let closed: () => void = () => {}
  const upstreamClosed = new Promise<void>((resolve) => { closed = resolve })
  const upstream = await startUpstream(t, (req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    res.write(Buffer.alloc(1024))
    req.socket.once('close', closed)
  })
  const { proxyUrl } = await startSidecar(t, upstream.url)
  await new Promise<void>((resolve) => {
    const req = httpRequest(proxyUrl + '/long', (res) => {
      res.once('data', () => { req.destroy(); resolve() })
    })
    req.on('error', () => {})
    req.end()
  })
  await upstreamClosed
  t.pass('the upstream connection was closed')
})
