import type { Socket } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'
import { startUpstream } from '../helpers/upstream.js'

// The upstream pool's connections: the queue bound refuses only when every connection
// is open and busy, a connection still being made is bounded by the connect timeout
// (not refused as busy), and closing the sidecar closes its connections.

t.test('UPSTREAM_QUEUE_LIMIT=0: a request that finds a free connection is sent, not refused as busy', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url, { UPSTREAM_QUEUE_LIMIT: '0' })
  for (const path of ['/first', '/second']) {
    const res = await request(proxyUrl + path)
    t.equal(res.statusCode, 200, path)
    await res.body.dump()
  }
  t.equal(upstream.received.length, 2)
})

t.test('a connection still being made is bounded by the connect timeout, not refused as busy after UPSTREAM_QUEUE_TIMEOUT_MS', async (t) => {
  // A TCP server that never says a word: the TLS handshake to it never completes.
  const silent = await startRawUpstream(t, () => {})
  const { proxyUrl } = await startSidecar(t, silent.url.replace('http:', 'https:'), {
    UPSTREAM_TIMEOUT_MS: '1500', UPSTREAM_QUEUE_TIMEOUT_MS: '100'
  })
  const started = performance.now()
  const res = await request(proxyUrl + '/slow-handshake')
  const body = await res.body.json() as { error: string }
  t.equal(res.statusCode, 502)
  t.equal(body.error, 'UPSTREAM_UNREACHABLE', 'the connection was never made')
  t.ok(performance.now() - started >= 1400, 'after the connect timeout, not the queue\'s')
  t.ok(silent.connections() <= 1, 'one connection tried')
})

t.test('closing the sidecar closes its keep-alive connections to the upstream', async (t) => {
  const upstream = await startUpstream(t)
  const sockets = new Set<Socket>()
  upstream.server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => { sockets.delete(socket) })
  })
  const { proxyUrl, app } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/kept')
  await res.body.dump()
  t.equal(sockets.size, 1, 'one keep-alive connection, idle')
  await app.close()
  // Well within undici's own idle timeout (4 s after the upstream's Keep-Alive hint), which would close it anyway.
  await eventually(t, 'the upstream connection closed', () => sockets.size === 0, 2_000)
})
