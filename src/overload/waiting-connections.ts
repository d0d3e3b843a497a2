// The proxy listener's unfinished request heads, in the order they began. Admission sees only
// whole heads, yet an unfinished one grows in Node's parser (it copies a growing header value
// at each read: ~38 KiB for a head of 16 KiB), so MAX_CONNECTIONS of them beside an admin-port
// flood outgrow 128 MiB. The overload manager closes the oldest when private memory nears the
// limit (manager.ts). A head is told at the parser's own boundary, a message's first byte: a
// body still arriving after an early answer is none, a head pipelined behind a request is one.
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { onHeadBegin, stopReading } from '../upstream/socket-internals.js'

export interface WaitingConnections {
  /**
   * Answers (`answerHead`) and closes connections holding an unfinished head, oldest head
   * first: up to `count`, leaving `keep` heads at least; returns how many. Idle keep-alives,
   * requests and bodies under way are never closed.
   */
  shedHeads: (count: number, keep?: number) => number
  /** How many connections hold an unfinished head. */
  heads: () => number
}

/**
 * Follows `server`'s connections. Call before gateConnections: the gate hands on only the
 * connections it admits. `answerHead` writes the answer and ends the socket (it is destroyed
 * once that is flushed).
 */
export function followWaiting (server: Server, answerHead: (socket: Socket) => void): WaitingConnections {
  /** Each socket whose last message began, and whether its head is still unfinished; a Map iterates in insertion order: the oldest head first. */
  const begun = new Map<Socket, () => boolean>()
  server.on('connection', (socket: Socket) => {
    const followed = onHeadBegin(socket, (unfinished) => {
      begun.delete(socket)
      begun.set(socket, unfinished)
    })
    if (followed) socket.once('close', () => { begun.delete(socket) })
  })
  /** The sockets holding an unfinished head, oldest first (those whose head was finished are forgotten). */
  const unfinishedHeads = (): Socket[] => {
    const heads: Socket[] = []
    for (const [socket, unfinished] of begun) {
      if (unfinished()) heads.push(socket)
      else begun.delete(socket)
    }
    return heads
  }
  return {
    shedHeads (count, keep = 0) {
      const heads = unfinishedHeads()
      const shed = heads.slice(0, Math.max(0, Math.min(count, heads.length - keep)))
      for (const socket of shed) {
        begun.delete(socket)
        // Node's parser reads the socket from C++ ('data' is never emitted): stopped, no head
        // finished after this answer can reach a route.
        stopReading(socket)
        answerHead(socket)
        socket.destroySoon()
      }
      return shed.length
    },
    heads: () => unfinishedHeads().length
  }
}
