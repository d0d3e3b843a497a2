// The gate's whole-head lane (src/overload/connection-gate.ts), on a bare http.Server: beyond the
// bound, a connection whose first read is a whole head is served and closed after its answer,
// at most `max` at once; the others get 503 OVERLOADED; a head split across reads is refused;
// refused ones linger `max` at once, the rest are closed as soon as answered.
import { createServer, type ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { boundedCount, gateConnections } from '../../src/overload/connection-gate.js'
import { eventually } from '../helpers/eventually.js'
import { statusOf } from '../helpers/raw-http.js'

const metrics = { errors: { inc: () => {} } } as unknown as Parameters<typeof gateConnections>[2]

async function gated (t: Test) {
  const held: ServerResponse[] = []
  const server = createServer((req, res) => {
    if (req.url === '/hold') held.push(res)
    else res.end('ok')
  })
  let refused = 0
  gateConnections(server, boundedCount(1, () => { refused += 1 }, () => {}), metrics, { max: 1, firstReadMs: 200 })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const port = (server.address() as AddressInfo).port
  const open = async (bytes: string): Promise<{ socket: Socket, answer: () => string, closed: Promise<void> }> => {
    const socket = connect(port, '127.0.0.1')
    t.teardown(() => { socket.destroy() })
    let answer = ''
    socket.setEncoding('latin1').on('data', (chunk: string) => { answer += chunk })
    socket.on('error', () => {})
    const closed = new Promise<void>((resolve) => socket.once('close', () => { resolve() }))
    await new Promise((resolve) => socket.once('connect', resolve))
    socket.write(bytes)
    return { socket, answer: () => answer, closed }
  }
  return { server, port, held, open, refused: () => refused }
}

t.test('at most `max` whole heads served beyond the bound; the next one 503; served ones closed after their answer', async (t) => {
  const { held, open, refused } = await gated(t)
  const slot = await open('GET /slow HTTP/1.1\r\nHost: x\r\n')
  const inLane = await open('GET /hold HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the held request reached the handler', () => held.length === 1)
  const beyond = await open('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'the lane full: 503', () => beyond.answer() !== '')
  t.equal(statusOf(beyond.answer()), 503, 'a whole head beyond a full lane gets 503')
  t.equal(refused(), 1, 'counted as refused')
  held[0]?.end('held')
  await inLane.closed
  t.equal(statusOf(inLane.answer()), 200, 'the one in the lane answered')
  t.match(inLane.answer(), /\r\nConnection: close\r\n/i, 'with connection: close')
  const next = await open('GET /fast HTTP/1.1\r\nHost: x\r\n\r\n')
  await next.closed
  t.equal(statusOf(next.answer()), 200, 'the lane free again: served')
  t.equal(slot.answer(), '', 'the admitted unfinished head still waits')
})

t.test('beyond the bound: a head split across reads, or silence, gets 503', async (t) => {
  const { open, refused } = await gated(t)
  await open('GET /slow HTTP/1.1\r\nHost: x\r\n')
  const split = await open('GET /fast HTTP/1.1\r\n')
  await eventually(t, 'an answer', () => split.answer() !== '')
  t.equal(statusOf(split.answer()), 503)
  const started = Date.now()
  const silent = await open('')
  await eventually(t, 'an answer to silence', () => silent.answer() !== '', 5000)
  t.equal(statusOf(silent.answer()), 503)
  t.ok(Date.now() - started >= 150, 'after firstReadMs')
  t.equal(refused(), 2)
})

t.test('a flood beyond the bound: `max` refused connections linger, the rest answered 503 and closed at once', async (t) => {
  const { server, port, open } = await gated(t)
  await open('GET /slow HTTP/1.1\r\nHost: x\r\n')
  // Peers that never close their side: a lingering close keeps the sidecar's socket open.
  const answers = await Promise.all(Array.from({ length: 6 }, async () => {
    const socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    t.teardown(() => { socket.destroy() })
    socket.on('error', () => {})
    let answer = ''
    socket.setEncoding('latin1').on('data', (chunk: string) => { answer += chunk })
    await new Promise((resolve) => socket.once('connect', resolve))
    socket.write('GET /livez HTTP/1.1\r\nHost: x\r\n')
    return () => answer
  }))
  await eventually(t, 'every one answered', () => answers.every((answer) => answer() !== ''))
  t.same(answers.map((answer) => statusOf(answer())), [503, 503, 503, 503, 503, 503])
  const connections = await new Promise<number>((resolve, reject) => { server.getConnections((err, n) => { if (err !== null) reject(err); else resolve(n) }) })
  t.equal(connections, 2, 'the admitted one and one lingering')
})
