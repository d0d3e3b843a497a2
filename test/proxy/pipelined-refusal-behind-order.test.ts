// A pipelined head Node's parser refuses (431, 400) while the request before it, an order, is
// in flight upstream: the order keeps its own answer (before, the refusal was sent as the
// order's answer and TI's 201 lost), then the connection closes. Found by an outside review.
import { createServer, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import t from 'tap'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'

for (const [name, next] of [['431 (head too large)', `GET /v2/store/c HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`], ['400 (not HTTP)', 'GARBAGE\x01\r\n\r\n']] as const) {
  t.test(`pipelined ${name} behind an order in flight`, async (t) => {
    const held: ServerResponse[] = []
    const ti = createServer((req, res) => { req.resume(); req.on('end', () => { held.push(res) }) })
    await new Promise<void>((resolve) => ti.listen(0, '127.0.0.1', resolve))
    t.teardown(() => { ti.closeAllConnections(); ti.close() })
    const sidecar = await startSidecar(t, `http://127.0.0.1:${(ti.address() as AddressInfo).port}`)
    const socket = connect(Number(new URL(sidecar.proxyUrl).port), '127.0.0.1')
    t.teardown(() => socket.destroy())
    let got = ''
    socket.on('data', (c: Buffer) => { got += c.toString('latin1') })
    socket.on('error', () => {})
    await new Promise((resolve) => socket.once('connect', resolve))
    const body = '{"sku":1}'
    socket.write(`POST /v2/store/orders HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
    await eventually(t, 'TI got the order', () => held.length === 1)
    await new Promise((resolve) => socket.write(next, resolve))
    // Time for the parser to refuse it before TI answers: what failed before. Correct code passes
    // in either order, so this wait can only make the test weaker, never flaky.
    await new Promise((resolve) => setTimeout(resolve, 100))
    held[0]!.writeHead(201, { 'content-type': 'application/json' })
    held[0]!.end('{"order":"PO-1"}')
    await eventually(t, 'the connection closed', () => socket.destroyed || socket.readableEnded, 10_000)
    t.match(got, /^HTTP\/1\.1 201 [^]*\{"order":"PO-1"\}\r\n0\r\n\r\n$/, 'the order\'s own answer, whole, and nothing after it')
  })
}
