// A pipelining caller's head split across reads behind a slow exchange: stopping the reading at
// once (as the first bound on heads behind an exchange did) ran Node's header timeout, begun at
// the head's first byte, while nothing was read, and the connection closed without an answer
// for the second request; main served it. An outside review found it. Now `readBehind` heads
// are read on; only beyond them does reading stop (held-heads.test.ts: those bounded).
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t, { type Test } from 'tap'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { recordingPeer as peer } from '../helpers/raw-http.js'
import { eventually } from '../helpers/eventually.js'

const HEADERS_TIMEOUT_MS = 1000

async function setUp (t: Test, readBehind: number) {
  const held: Array<() => void> = []
  const sockets: Socket[] = []
  const server: Server = createServer({ headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: 0, connectionsCheckingInterval: 100 }, (req: IncomingMessage, res) => {
    sockets.push(req.socket)
    if (req.url === '/hold') held.push(() => res.end('held done'))
    else res.end(`${req.url ?? ''} served`)
  })
  const waiting = followWaiting(server, { answerHead: (socket) => { socket.end() }, readBehind })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const end of held) end(); server.closeAllConnections(); server.close() })
  return { server, waiting, held, sockets }
}

/** A GET held past the header timeout, then a GET whose head arrives in two writes 300 ms apart. */
async function splitBehindSlow (t: Test, readBehind: number) {
  const { server, waiting, held } = await setUp(t, readBehind)
  const client = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n')
  await eventually(t, 'the GET routed, the next head begun behind it', () => held.length === 1 && waiting.status().heldHeads === 1)
  await sleep(300)
  client.socket.write('X-Late: 1\r\n\r\n')
  await sleep(HEADERS_TIMEOUT_MS + 500)
  held[0]!()
  await eventually(t, 'the first answered, then the second, or the connection closed', () => client.got().includes('/next served') || client.closed(), 10_000)
  return { client, waiting }
}

t.test('read on behind a slow exchange: a split head is whole in time, both requests answered in order', async (t) => {
  const { client, waiting } = await splitBehindSlow(t, 1)
  t.match(client.got(), /held done[^]*\/next served/)
  t.equal(waiting.status().heldHeads, 0)
})

t.test('not read (readBehind 0): the header timeout ends the connection, the second request unanswered', async (t) => {
  const { client } = await splitBehindSlow(t, 0)
  t.notMatch(client.got(), /\/next served/, 'what the allowance is for')
})

t.test('beyond readBehind, the next connection\'s head behind an exchange is not read', async (t) => {
  const { server, waiting, held, sockets } = await setUp(t, 1)
  await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\nX-Pad: ')
  await eventually(t, 'one held, read on', () => held.length === 1 && waiting.status().heldHeads === 1)
  const second = await peer(t, server, 'GET /hold HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nX-Pad: ')
  await eventually(t, 'two held', () => held.length === 2 && waiting.status().heldHeads === 2)
  const before = sockets[1]!.bytesRead
  second.socket.write('b'.repeat(256 * 1024))
  await eventually(t, 'the client wrote it all out', () => second.socket.writableLength === 0)
  await sleep(200)
  t.equal(sockets[1]!.bytesRead, before, 'the second connection is not read')
})
