import { once } from 'node:events'
import { connect, createServer, type Server, type Socket } from 'node:net'
import type { Test } from 'tap'

/**
 * A tiny TCP proxy on a loopback port in front of `targetPort`, so that one client (a
 * sidecar's Redis connection, or every sidecar's upstream pool) can be cut off alone:
 * - `stall()`: nothing is forwarded either way; connections stay open and new ones are
 *   accepted (a network stall: what was sent arrives late, after `heal()`);
 * - `cut()`: every connection destroyed and the port closed, so connecting is refused;
 * - `heal()`: forwarding again (what a stall held is delivered), the port open again.
 */
export interface FaultProxy {
  readonly port: number
  readonly mode: 'open' | 'stalled' | 'cut'
  stall: () => void
  cut: () => Promise<void>
  heal: () => Promise<void>
}

interface Pair { client: Socket, target: Socket, toTarget: Buffer[], toClient: Buffer[] }

export async function startFaultProxy (t: Pick<Test, 'teardown'>, targetPort: number): Promise<FaultProxy> {
  let mode: FaultProxy['mode'] = 'open'
  const pairs = new Set<Pair>()

  const flush = (pair: Pair): void => {
    for (const chunk of pair.toTarget.splice(0)) pair.target.write(chunk)
    for (const chunk of pair.toClient.splice(0)) pair.client.write(chunk)
  }
  const relay = (from: Socket, to: Socket, held: Buffer[]): void => {
    from.on('data', (chunk: Buffer) => {
      if (mode === 'stalled') held.push(chunk)
      else to.write(chunk)
    })
  }
  const onConnection = (client: Socket): void => {
    const target = connect(targetPort, '127.0.0.1')
    const pair: Pair = { client, target, toTarget: [], toClient: [] }
    pairs.add(pair)
    const end = (): void => {
      pairs.delete(pair)
      client.destroy()
      target.destroy()
    }
    // Either side gone (refused, reset, closed): the other goes too, as one connection would.
    for (const socket of [client, target]) {
      socket.on('error', end)
      socket.on('close', end)
    }
    relay(client, target, pair.toTarget)
    relay(target, client, pair.toClient)
  }

  let server: Server = createServer(onConnection)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0

  const close = async (): Promise<void> => {
    for (const pair of pairs) { pair.client.destroy(); pair.target.destroy() }
    pairs.clear()
    if (!server.listening) return
    await new Promise<void>((resolve) => server.close(() => { resolve() }))
  }
  t.teardown(close)
  return {
    port,
    get mode () { return mode },
    stall: () => { if (mode === 'open') mode = 'stalled' },
    cut: async () => {
      if (mode === 'cut') return
      mode = 'cut'
      await close()
    },
    heal: async () => {
      if (mode === 'stalled') {
        mode = 'open'
        for (const pair of pairs) flush(pair)
        return
      }
      if (mode !== 'cut') return
      server = createServer(onConnection)
      server.listen(port, '127.0.0.1')
      await once(server, 'listening')
      mode = 'open'
    }
  }
}
