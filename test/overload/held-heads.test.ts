// A head pipelined behind an exchange under way cannot be answered 503 (the caller would read
// it as that exchange's answer), so it was neither bounded nor charged: 100 connections each
// with a forwarded GET and then an unfinished ~1 MB head (MAX_HEADER_BYTES 1 MiB) OOM-killed a
// 128 MiB sidecar. Such a connection is no longer read until the exchange is answered: the head
// holds what the read that began it brought, counted apart from the bound (`heldHeads`), then is
// counted and bounded as any other. A head whole within that read is served as before.
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import t, { type Test } from 'tap'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { rawRequest, recordingPeer as peer } from '../helpers/raw-http.js'
import { eventually } from '../helpers/eventually.js'

const MiB = 1024 * 1024
/** What one read of a socket brings at most (libuv's 64 KiB), with room for the request before it. */
const ONE_READ_BYTES = 64 * 1024 + 1024

async function setUp (t: Test) {
  const held: Array<() => void> = []
  const sockets: Socket[] = []
  const server: Server = createServer({ maxHeaderSize: MiB }, (req: IncomingMessage, res) => {
    if (req.url !== '/ping') sockets.push(req.socket)
    let body = ''
    req.setEncoding('latin1')
    req.on('data', (chunk: string) => { body += chunk })
    req.on('end', () => {
      if (req.url === '/hold') held.push(() => res.end('held done'))
      else res.end(`${req.url ?? ''} ${body}`)
    })
  })
  const waiting = followWaiting(server, { answerHead: (socket) => { socket.end() } })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const end of held) end(); server.closeAllConnections(); server.close() })
  return { server, waiting, held, sockets }
}

t.test('a 960 KiB head behind a held GET: not read past the read that began it until the GET is answered', async (t) => {
  const { server, waiting, held, sockets } = await setUp(t)
  const client = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nX-Pad: ')
  await eventually(t, 'the GET routed, its next head held', () => held.length === 1 && waiting.status().heldHeads === 1)
  t.equal(waiting.heads(), 0, 'not counted against the bound meanwhile')
  for (let i = 0; i < 15; i++) client.socket.write('a'.repeat(64 * 1024))
  await eventually(t, 'the client wrote it all out', () => client.socket.writableLength === 0)
  // A request on another connection, answered: the server's loop has since polled the first
  // connection too (libuv reads up to 32 × 64 KiB of a readable socket each turn).
  const { port } = server.address() as AddressInfo
  t.match(await rawRequest(`http://127.0.0.1:${port}`, 'GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), /\/ping /)
  const read = sockets[0]!.bytesRead
  t.ok(read <= ONE_READ_BYTES, `the server read ${read} bytes of the connection, not the 960 KiB head`)
  held[0]!()
  await eventually(t, 'answered, then read again: the head counted as any other', () => client.got().includes('held done') && waiting.heads() === 1 && waiting.status().heldHeads === 0)
  await eventually(t, 'the rest of the head read', () => sockets[0]!.bytesRead > 15 * 64 * 1024, 10_000)
  client.socket.write('\r\n\r\n')
  await eventually(t, 'the head, whole, served', () => client.got().includes('/next '), 10_000)
  t.equal(waiting.heads(), 0)
})

t.test('a whole request with a body pipelined behind a held GET: its body is read, it is served', async (t) => {
  const { server, waiting, held } = await setUp(t)
  const client = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n01234')
  await eventually(t, 'the GET routed', () => held.length === 1)
  client.socket.write('56789')
  held[0]!()
  await eventually(t, 'both answered, in order', () => /held done[^]*\/echo 0123456789/.test(client.got()), 10_000)
  t.equal(waiting.status().heldHeads, 0)
  t.equal(waiting.heads(), 0)
})

t.test('two requests pipelined behind a held GET, the last head unfinished: held until both before it are answered', async (t) => {
  const { server, waiting, held } = await setUp(t)
  const client = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /last HTTP/1.1\r\nHost: x\r\nX-A: a')
  await eventually(t, 'both held GETs routed, the last head held', () => held.length === 2 && waiting.status().heldHeads === 1)
  held[0]!()
  await eventually(t, 'the first answered', () => client.got().includes('held done'))
  t.equal(waiting.status().heldHeads, 1, 'still held behind the second')
  held[1]!()
  await eventually(t, 'the second answered, the head counted', () => waiting.status().heldHeads === 0 && waiting.heads() === 1)
  client.socket.write('a\r\n\r\n')
  await eventually(t, 'the last served', () => client.got().includes('/last '), 10_000)
})
