import { connect } from 'node:net'

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
