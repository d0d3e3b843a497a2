// A real sidecar that sheds requests with long bodies: each gets its 503 with a status line,
// its body is read and dropped with the connection kept, and the bytes dropped pace young
// collections (DISCARD_COLLECT_BYTES), so that a burst of shed uploads does not pile up reads
// that only a collection frees.
import { once } from 'node:events'
import { connect } from 'node:net'
import t from 'tap'
import { DISCARD_COLLECT_BYTES } from '../../src/overload/manager.js'
import { startSidecar } from '../helpers/build.js'
import { rawRequest } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024

t.test('a shed upload is read to its end and dropped, the connection kept, a young collection every 8 MiB of it', async (t) => {
  const upstream = await startUpstream(t)
  const memory = { young: 0 }
  const { proxyUrl } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(128 * MiB) }, {
    // Over the high water from the first sample: every request is shed.
    memory: { readLiveBytes: () => 100 * MiB, collectGarbage: () => {}, collectYoungGarbage: () => { memory.young += 1 } }
  })
  const size = 3 * DISCARD_COLLECT_BYTES + 1024
  const chunked = (body: Buffer): string => `${body.length.toString(16)}\r\n${body.toString('latin1')}\r\n0\r\n\r\n`
  const body = Buffer.alloc(size, 'b')
  const answer = await rawRequest(proxyUrl,
    `POST /v2/store/orders HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n${body.toString('latin1')}` +
    `POST /v2/store/orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${chunked(body)}` +
    'GET /v2/store/products HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 5000)
  t.equal(answer.match(/HTTP\/1\.1 503 Service Unavailable\r\n/g)?.length, 3, 'three status lines on one connection: each body was read past')
  t.equal(upstream.received.length, 0, 'nothing sent upstream')
  t.equal(memory.young, 6, 'two bodies of 3 × 8 MiB and a little: six young collections')
})

t.test('an excess connection\'s upload, read and dropped while it lingers, paces young collections too', async (t) => {
  const upstream = await startUpstream(t)
  const memory = { young: 0 }
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_CONNECTIONS: '1', MEMORY_LIMIT_BYTES: '0' }, {
    memory: { collectYoungGarbage: () => { memory.young += 1 } }
  })
  const { hostname, port } = new URL(proxyUrl)
  const first = connect(Number(port), hostname)
  t.teardown(() => { first.destroy() })
  await once(first, 'connect')
  const size = 3 * DISCARD_COLLECT_BYTES
  const answer = await rawRequest(proxyUrl, `POST /v2/store/orders HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n${'b'.repeat(size)}`, 5000)
  t.match(answer, /^HTTP\/1\.1 503 Service Unavailable\r\n/, 'the excess connection is answered')
  t.ok(memory.young >= 2, `young collections while its upload was read and dropped: ${memory.young}, at least one per 8 MiB of 16 MiB`)
  t.equal(upstream.received.length, 0)
})
