import { request as httpRequest } from 'node:http'
import type { Socket } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { HOLD_BACK_MAX_BYTES } from '../../src/upstream/forward.js'
import { startSidecar } from '../helpers/build.js'
import { metricValue } from '../helpers/metrics.js'
import { scrapeSettled } from '../helpers/metrics-scrape.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'
import { startUpstream } from '../helpers/upstream.js'

// Two promises about what the caller sees of an upstream answer:
// - an answer cut right after its head still shows its status line, then the cut (never a
//   bare connection error, never a complete answer);
// - a 401 held back for a replay is held whole up to HOLD_BACK_MAX_BYTES; a larger one is
//   sent as it comes, whole, and not replayed.

/** What a plain HTTP client sees: the status line (0 if none came) and whether the body completed. */
async function seen (url: string) {
  return await new Promise<{ status: number, complete: boolean }>((resolve) => {
    const req = httpRequest(url, (res) => {
      res.resume()
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, complete: res.complete }) })
      res.on('error', () => { resolve({ status: res.statusCode ?? 0, complete: false }) })
    })
    req.on('error', () => { resolve({ status: 0, complete: false }) })
    req.end()
  })
}

const cuts: Record<string, (socket: Socket) => void> = {
  'a length-framed answer whose connection closes after the head': (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n')
    setTimeout(() => { socket.destroy() }, 200)
  },
  'a close-delimited answer whose connection is reset after the head': (socket) => {
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n')
    setTimeout(() => { socket.resetAndDestroy() }, 200)
  }
}

for (const [name, cut] of Object.entries(cuts)) {
  t.test(`${name}: the caller sees the status line, then the cut`, async (t) => {
    const upstream = await startRawUpstream(t, cut)
    const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url)
    t.same(await seen(proxyUrl + '/cut'), { status: 200, complete: false })
    await scrapeSettled(adminUrl)
    t.equal(await metricValue(adminUrl, 'store_auth_proxy_requests_total', { method: 'GET', status_class: '2xx', outcome: 'truncated' }), 1)
  })
}

/** An upstream whose first answer on each path is a 401 with `size` bytes of body; 200 after. */
async function rejectingOnce (t: Test, size: number) {
  const body = Buffer.alloc(size)
  for (let i = 0; i < size; i++) body[i] = 97 + (i % 26)
  const seenPaths = new Map<string, number>()
  const upstream = await startUpstream(t, (req, res) => {
    const n = (seenPaths.get(req.url ?? '') ?? 0) + 1
    seenPaths.set(req.url ?? '', n)
    if (n === 1) {
      res.writeHead(401, { 'content-type': 'text/plain', 'content-length': String(size) })
      // In pieces, so the sidecar sees the body arrive in several chunks.
      for (let at = 0; at < size; at += 16 * 1024) res.write(body.subarray(at, at + 16 * 1024))
      res.end()
      return
    }
    res.end('replayed')
  })
  return { ...upstream, body, times: (path: string) => seenPaths.get(path) ?? 0 }
}

t.test(`a 401 of exactly HOLD_BACK_MAX_BYTES (${HOLD_BACK_MAX_BYTES}) is held whole: the request is replayed`, async (t) => {
  const upstream = await rejectingOnce(t, HOLD_BACK_MAX_BYTES)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/exact')
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'replayed')
  t.equal(upstream.times('/exact'), 2)
})

t.test('a 401 larger than HOLD_BACK_MAX_BYTES is sent as it comes, byte for byte, and not replayed', async (t) => {
  const upstream = await rejectingOnce(t, HOLD_BACK_MAX_BYTES + 40_000)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/large')
  t.equal(res.statusCode, 401)
  t.equal(res.headers['content-type'], 'text/plain')
  t.same(Buffer.from(await res.body.arrayBuffer()), upstream.body)
  t.equal(upstream.times('/large'), 1)
})
