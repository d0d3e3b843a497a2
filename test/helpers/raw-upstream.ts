import { createServer, type Socket } from 'node:net'
import type { Test } from 'tap'

/**
 * An "upstream" that is a bare TCP server: for each connection, `script` decides which
 * bytes go back and when, so a test can send what no HTTP library would (invalid
 * bytes, interim answers, resets, close-delimited bodies). Records what arrived.
 */
export async function startRawUpstream (t: Test, script: (socket: Socket, firstChunk: Buffer) => void) {
  const received: Buffer[] = []
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    socket.once('data', (chunk: Buffer) => {
      received.push(chunk)
      script(socket, chunk)
    })
    socket.on('close', () => { sockets.delete(socket) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy()
    server.close(() => { resolve() })
  }))
  const { port } = server.address() as { port: number }
  return { url: `http://127.0.0.1:${port}`, received, connections: () => received.length }
}
