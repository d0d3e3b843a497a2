// The workarounds of src/upstream/socket-internals.ts, each driven through its socket states one
// step at a time (no timing): if an undici or Node upgrade changes what they rely on,
// these fail.
import { once } from 'node:events'
import { createServer, connect, type AddressInfo, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { createResetWatch, keepReadingAfterWriteError, pendingResponse, type SocketWrites } from '../../src/upstream/socket-internals.js'

// events.once would reject on the 'error' these tests provoke.
const closed = async (socket: Socket): Promise<void> => { await new Promise((resolve) => { socket.once('close', resolve) }) }
const errno = (code: string): NodeJS.ErrnoException => Object.assign(new Error(code), { code })

/** A socket stand-in whose writes fail with `code`, recording how often the real write ran. */
function failingWrites (code: string): SocketWrites & { calls: number } {
  const writes = {
    calls: 0,
    _write (_chunk: unknown, _encoding: BufferEncoding, cb: (err?: Error | null) => void) { writes.calls++; cb(errno(code)) },
    _writev (_chunks: unknown, cb: (err?: Error | null) => void) { writes.calls++; cb(errno(code)) }
  }
  return writes
}

for (const code of ['EPIPE', 'ECONNRESET']) {
  t.test(`a write that fails with ${code} ends the writing, never the socket`, async (t) => {
    const socket = failingWrites(code)
    keepReadingAfterWriteError(socket)
    const results: Array<Error | null | undefined> = []
    socket._write(Buffer.from('a'), 'latin1', (err) => { results.push(err) })
    socket._writev([], (err) => { results.push(err) })
    socket._write(Buffer.from('b'), 'latin1', (err) => { results.push(err) })
    t.same(results, [undefined, undefined, undefined], 'no write reports an error')
    t.equal(socket.calls, 1, 'after the first failure, nothing more is written')
  })
}

t.test('any other write error still fails the socket', async (t) => {
  const socket = failingWrites('EACCES')
  keepReadingAfterWriteError(socket)
  let seen: Error | null | undefined
  socket._write(Buffer.from('a'), 'latin1', (err) => { seen = err })
  t.equal((seen as NodeJS.ErrnoException | undefined)?.code, 'EACCES')
  socket._writev([], (err) => { seen = err })
  t.equal(socket.calls, 2, 'the writing goes on')
})

/** A connected pair on loopback: `ours` is the upstream socket as the sidecar holds it, `theirs` the upstream's end. */
async function socketPair (t: Test): Promise<{ ours: Socket, theirs: Socket }> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const accepted = once(server, 'connection') as Promise<[Socket]>
  const ours = connect((server.address() as AddressInfo).port, '127.0.0.1')
  await once(ours, 'connect')
  const [theirs] = await accepted
  t.teardown(() => { ours.destroy(); theirs.destroy() })
  return { ours, theirs }
}

/** The upstream answers, then resets the connection; `ours` has read nothing yet. */
async function answeredThenReset (ours: Socket, theirs: Socket): Promise<void> {
  ours.pause()
  await new Promise<void>((resolve) => { theirs.write('HTTP/1.1 413 Payload Too Large\r\n\r\n', () => { resolve() }) })
  theirs.resetAndDestroy()
  await once(theirs, 'close')
}

t.test('on a real socket: the answer that came before the reset is still read after a write fails', async (t) => {
  const { ours, theirs } = await socketPair(t)
  keepReadingAfterWriteError(ours)
  const errors: string[] = []
  ours.on('error', (err: NodeJS.ErrnoException) => { errors.push(err.code ?? err.message) })
  await answeredThenReset(ours, theirs)
  // The reset is in: this write fails at once, and must not end the socket.
  const written = await new Promise<Error | null | undefined>((resolve) => { ours.write(Buffer.alloc(1024), resolve) })
  t.notOk(written, 'the failed write reports nothing')
  t.notOk(ours.destroyed, 'the socket is still open for reading')
  ours.resume()
  const [chunk] = await once(ours, 'data') as [Buffer]
  t.equal(chunk.toString(), 'HTTP/1.1 413 Payload Too Large\r\n\r\n', 'the answer is read')
})

t.test('on a real socket, unguarded: the same write error loses the answer (what the guard is for)', async (t) => {
  const { ours, theirs } = await socketPair(t)
  let data = ''
  ours.on('data', (c: Buffer) => { data += c.toString() })
  ours.on('error', () => {})
  await answeredThenReset(ours, theirs)
  const failed = await new Promise<Error | null | undefined>((resolve) => { ours.write(Buffer.alloc(1024), resolve) })
  t.match((failed as NodeJS.ErrnoException | undefined)?.code, /^(EPIPE|ECONNRESET)$/)
  ours.resume()
  if (!ours.destroyed) await closed(ours)
  t.equal(data, '', 'nothing was read')
})

t.test('the reset watch is true only while the ECONNRESET is being handled, on the same tick', async (t) => {
  const { ours, theirs } = await socketPair(t)
  const resets = createResetWatch()
  resets.watch(ours)
  const seen: boolean[] = []
  // Added after the watch, like undici's own listener.
  ours.on('error', () => { seen.push(resets.resetting()) })
  t.equal(resets.resetting(), false)
  theirs.resetAndDestroy()
  await closed(ours)
  t.same(seen, [true], 'seen by the listener that follows')
  t.equal(resets.resetting(), false, 'cleared by the next tick')
})

t.test('the reset watch ignores other socket errors', async (t) => {
  const { ours } = await socketPair(t)
  const resets = createResetWatch()
  resets.watch(ours)
  const seen: boolean[] = []
  ours.on('error', () => { seen.push(resets.resetting()) })
  ours.destroy(errno('ETIMEDOUT'))
  await closed(ours)
  t.same(seen, [false])
})

t.test('pendingResponse finds the exchange Node\'s http server keeps on the socket', async (t) => {
  const { createServer: createHttpServer, request } = await import('node:http')
  let found: unknown
  const server = createHttpServer((req, res) => {
    found = pendingResponse(req.socket) === res
    res.end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  await new Promise<void>((resolve) => {
    request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, (res) => { res.resume(); res.on('end', resolve) }).end()
  })
  t.equal(found, true)
  t.equal(pendingResponse({}), null, 'null where there is none')
})
