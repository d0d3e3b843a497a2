// The proxy listener's connections that hold no request in progress, in the order they began
// to wait: an unfinished head, or an idle keep-alive. Admission sees only whole heads, yet an
// unfinished one grows in Node's parser (it copies a growing header value at each read: ~40 KiB
// for a head of 16 KiB), so MAX_CONNECTIONS of them beside an admin-port flood outgrow 128 MiB.
// The overload manager closes the oldest when private memory nears the limit (manager.ts).
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { stopReading } from '../upstream/socket-internals.js'

export interface WaitingConnections {
  /**
   * Answers (`answerHead`) and closes up to `count` connections holding an unfinished head,
   * oldest first; returns how many. An idle one is left: it holds no head, MAX_CONNECTIONS
   * bounds how many there are, and closing it would cost a caller its keep-alive for nothing.
   */
  shedHeads: (count: number) => number
  /** How many connections hold an unfinished head. */
  heads: () => number
}

/**
 * Follows `server`'s connections. Call before gateConnections: the gate hands on only the
 * connections it admits. `answerHead` writes the answer and ends the socket (it is destroyed
 * once that is flushed).
 */
export function followWaiting (server: Server, answerHead: (socket: Socket) => void): WaitingConnections {
  /** Each waiting socket and its bytesRead when it began to wait: more read since is a head under way. */
  const waiting = new Map<Socket, number>()
  /** Requests under way on a socket (pipelined ones queue behind the first). */
  const underWay = new WeakMap<Socket, number>()
  // A Map iterates in insertion order: deleted and set again, a socket is the youngest.
  const wait = (socket: Socket): void => { if (!socket.destroyed) waiting.set(socket, socket.bytesRead) }
  server.on('connection', (socket: Socket) => {
    wait(socket)
    socket.once('close', () => { waiting.delete(socket) })
  })
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    const socket = req.socket as Socket
    waiting.delete(socket)
    underWay.set(socket, (underWay.get(socket) ?? 0) + 1)
    res.once('close', () => {
      const left = (underWay.get(socket) ?? 1) - 1
      underWay.set(socket, left)
      if (left === 0) wait(socket)
    })
  })
  const holdsHead = ([socket, readAt]: [Socket, number]): boolean => socket.bytesRead > readAt
  return {
    shedHeads (count) {
      let shed = 0
      for (const entry of waiting) {
        if (shed >= count) break
        if (!holdsHead(entry)) continue
        const [socket] = entry
        waiting.delete(socket)
        // Node's parser reads the socket from C++ ('data' is never emitted): stopped, no head
        // finished after this answer can reach a route.
        stopReading(socket)
        answerHead(socket)
        socket.destroySoon()
        shed += 1
      }
      return shed
    },
    heads: () => [...waiting].filter(holdsHead).length
  }
}
