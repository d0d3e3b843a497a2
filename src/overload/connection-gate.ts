// The connection gate both listeners stand behind: a bound on open connections, with a status
// line (503 OVERLOADED, Retry-After, Connection: close) for each new one beyond it, never a
// connection dropped without a word as net.Server's maxConnections drops it.
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { OverloadedError, sendError } from '../http/errors.js'
import type { Metrics } from '../metrics.js'
import { EXCESS_LINGER_MS, OVERLOAD_RETRY_AFTER_S } from './manager.js'

export interface ConnectionCount {
  /** Whether a new connection must be answered 503 and closed (a reason), or undefined: counted open until disconnect(). */
  connect: () => string | undefined
  /** An admitted connection closed (once per admission). */
  disconnect: () => void
  /** Bytes an answered excess connection sent, read and dropped (the overload manager paces collections on them). */
  discarded?: (bytes: number) => void
}

/**
 * Puts `server` behind `count`. Node's http.Server handles a connection in its 'connection'
 * listener (documented: emitting 'connection' hands it a socket); the gate takes that
 * listener's place and calls it for the connections it admits. An excess connection gets no
 * HTTP parser (a slowloris one costs only its socket); the answer may reach the caller before
 * its request is written, so what it sends is read and discarded until it closes or
 * EXCESS_LINGER_MS pass: closing with the request unread would reset the connection, and a
 * reset can destroy the answer before it is read (RFC 9112 §9.6, a lingering close).
 */
export function gateConnections (server: Server, count: ConnectionCount, metrics: Pick<Metrics, 'errors'>): void {
  const handlers = server.listeners('connection') as Array<(socket: Socket) => void>
  server.removeAllListeners('connection')
  server.on('connection', (socket: Socket) => {
    if (count.connect() === undefined) {
      socket.once('close', count.disconnect)
      for (const handle of handlers) handle.call(server, socket)
      return
    }
    answerExcess(socket, metrics, count.discarded)
  })
}

/** 503 OVERLOADED on a bare socket, then a lingering close. */
export function answerExcess (socket: Socket, metrics: Pick<Metrics, 'errors'>, discarded?: (bytes: number) => void): void {
  // A reset by the caller after the answer is nobody's failure.
  socket.on('error', () => {})
  const linger = setTimeout(() => { socket.destroy() }, EXCESS_LINGER_MS).unref()
  socket.once('close', () => { clearTimeout(linger) })
  sendError(socket, new OverloadedError(), metrics, { retryAfterSeconds: OVERLOAD_RETRY_AFTER_S })
  // Read and dropped like a shed request's body.
  socket.on('data', discarded === undefined ? () => {} : (chunk: Buffer) => { discarded(chunk.length) })
}

/**
 * A plain bound on open connections (the admin listener's). `onShedding` is told at the first
 * connection refused and when one closes after that: one log line each way, however many are refused.
 */
export function boundedCount (max: number, onExcess: () => void, onShedding: (shedding: boolean) => void): ConnectionCount & { open: () => number } {
  let open = 0
  let shedding = false
  return {
    connect () {
      if (open < max) {
        open += 1
        return undefined
      }
      onExcess()
      if (!shedding) onShedding(shedding = true)
      return 'connections'
    },
    disconnect () {
      open -= 1
      if (shedding) onShedding(shedding = false)
    },
    open: () => open
  }
}
