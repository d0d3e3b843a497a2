import type { Server } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import type { Test } from 'tap'

/**
 * Sends bytes exactly as given and returns everything the server answered until it
 * closed the connection (or `idleMs` passed without data). For requests no
 * well-behaved client would send: smuggling shapes, absolute-form targets.
 */
export async function rawRequest (url: string, bytes: string | Buffer, idleMs = 1500): Promise<string> {
  const { hostname, port } = new URL(url)
  return await new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let answer = ''
    socket.setEncoding('latin1')
    socket.setTimeout(idleMs, () => { socket.destroy(); resolve(answer) })
    socket.on('data', (chunk: string) => { answer += chunk })
    socket.on('error', reject)
    socket.on('close', () => { resolve(answer) })
    socket.write(bytes)
  })
}

export function statusOf (answer: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)
}

/** A raw connection that records what it got back and whether it was closed. */
export interface RecordingPeer { socket: Socket, got: () => string, closed: () => boolean }

/** Connects to `server` (or a port on loopback), sends `send` as it is, and records the rest; destroyed at teardown. */
export async function recordingPeer (t: Test, server: Server | number, send: string): Promise<RecordingPeer> {
  const socket = connect(typeof server === 'number' ? server : (server.address() as AddressInfo).port, '127.0.0.1')
  t.teardown(() => { socket.destroy() })
  socket.on('error', () => {})
  let got = ''
  let closed = false
  socket.on('data', (chunk: Buffer) => { got += chunk.toString('latin1') })
  socket.on('close', () => { closed = true })
  await new Promise((resolve) => socket.once('connect', resolve))
  if (send !== '') socket.write(send)
  return { socket, got: () => got, closed: () => closed }
}
