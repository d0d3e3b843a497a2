// The connection gate both listeners stand behind: a bound on open connections, with a status
// line (503 OVERLOADED, Retry-After, Connection: close) for each new one beyond it, never a
// connection dropped without a word as net.Server's maxConnections drops it.
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { OverloadedError, rawErrorAnswer } from '../http/errors.js'
import type { Metrics } from '../metrics.js'
import { EXCESS_LINGER_MS, OVERLOAD_RETRY_AFTER_S } from './manager.js'

export interface ConnectionCount {
  /** Whether a new connection must be answered 503 and closed (a reason), or undefined: counted open until disconnect(). */
  connect: () => string | undefined
  /** An admitted connection closed (once per admission). */
  disconnect: () => void
  /** Bytes an answered excess connection sent, read and dropped (the overload manager paces collections on them). */
  discarded?: (bytes: number) => void
  /** An excess connection is answered 503 (for a count whose connect() does not count that itself). */
  refused?: () => void
}

/**
 * For a listener probed by the kubelet (the admin one): a connection beyond the bound is read
 * once before it is refused, and served when that first read holds a whole request head. A
 * probe or a scrape sends its head at once and is answered at once: it holds no slot the way
 * an unfinished head does, and a flood of unfinished heads holding every slot cannot fail
 * it. Served so, a connection is closed after its answer; at most `max` at once. Refused ones
 * linger (read and dropped) `max` at once too; more are closed as soon as answered: a flood's
 * thousands would otherwise each hold a socket for EXCESS_LINGER_MS.
 */
export interface WholeHeadLane {
  max: number
  /** How long a connection beyond the bound may take to send anything before its 503. */
  firstReadMs: number
}

/** Whether `chunk` holds the end of a request head (llhttp takes a bare LF too). */
const holdsHeadEnd = (chunk: Buffer): boolean => chunk.indexOf('\n\r\n') !== -1 || chunk.indexOf('\n\n') !== -1

/**
 * Puts `server` behind `count`. Node's http.Server handles a connection in its 'connection'
 * listener (documented: emitting 'connection' hands it a socket); the gate takes that
 * listener's place and calls it for the connections it admits. An excess connection gets no
 * HTTP parser (a slowloris one costs only its socket); the answer may reach the caller before
 * its request is written, so what it sends is read and discarded until it closes or
 * EXCESS_LINGER_MS pass: closing with the request unread would reset the connection, and a
 * reset can destroy the answer before it is read (RFC 9112 §9.6, a lingering close).
 */
export function gateConnections (server: Server, count: ConnectionCount, metrics: Pick<Metrics, 'errors'>, lane?: WholeHeadLane): void {
  const handlers = server.listeners('connection') as Array<(socket: Socket) => void>
  server.removeAllListeners('connection')
  const serve = (socket: Socket): void => { for (const handle of handlers) handle.call(server, socket) }
  let lingering = 0
  const refuse = (socket: Socket): void => {
    count.refused?.()
    if (lane !== undefined && lingering >= lane.max) {
      // A flood's excess: answered and closed at once, no socket kept for a lingering close.
      socket.on('error', ignore)
      endOverloaded(socket, metrics)
      socket.destroy()
      return
    }
    lingering += 1
    socket.once('close', () => { lingering -= 1 })
    answerExcess(socket, metrics, count.discarded)
  }
  server.on('connection', (socket: Socket) => {
    if (count.connect() === undefined) {
      socket.once('close', count.disconnect)
      serve(socket)
      return
    }
    if (lane === undefined) refuse(socket)
    else laneOrRefuse(socket)
  })
  if (lane === undefined) return
  const { max, firstReadMs } = lane
  let inLane = 0
  const closeAfterAnswer = new WeakSet<Socket>()
  // Before Fastify's own listener, so the answer it may send at once already says `connection: close`.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    if (closeAfterAnswer.has(req.socket as Socket)) res.shouldKeepAlive = false
  })
  function laneOrRefuse (socket: Socket): void {
    if (inLane >= max) {
      refuse(socket)
      return
    }
    socket.on('error', ignore)
    let decided = false
    const onData = (chunk: Buffer): void => { decide(chunk) }
    const onClose = (): void => { decide(undefined) }
    // The wait ends after the reads of the turn it ends in: a head already in the socket's
    // buffer, behind a busy turn, is read before the connection is refused for silence.
    const timer = setTimeout(() => { setImmediate(decide, undefined) }, firstReadMs).unref()
    socket.on('data', onData)
    socket.once('close', onClose)
    function decide (chunk: Buffer | undefined): void {
      if (decided) return
      decided = true
      clearTimeout(timer)
      socket.off('data', onData)
      socket.off('close', onClose)
      if (socket.destroyed) return
      if (chunk === undefined || inLane >= max || !holdsHeadEnd(chunk)) {
        socket.pause()
        if (chunk !== undefined) count.discarded?.(chunk.length)
        refuse(socket)
        return
      }
      socket.off('error', ignore)
      inLane += 1
      socket.once('close', () => { inLane -= 1 })
      closeAfterAnswer.add(socket)
      // Handed back whole: Node's parser reads the head from the socket as if nothing had.
      socket.unshift(chunk)
      serve(socket)
    }
  }
}

const ignore = (): void => {}

let excessAnswer: Buffer | undefined

/** 503 OVERLOADED (sendError's bytes, rendered once) written to a bare socket, which is ended: counted, and closed by the caller. */
export function endOverloaded (socket: Socket, metrics: Pick<Metrics, 'errors'>): void {
  // A flood's every connection comes here: one Buffer for all, no error object (and stack) for each.
  excessAnswer ??= Buffer.from(rawErrorAnswer(new OverloadedError(), OVERLOAD_RETRY_AFTER_S), 'latin1')
  metrics.errors.inc({ code: 'OVERLOADED' })
  if (socket.writable) socket.end(excessAnswer)
}

/** 503 OVERLOADED on a bare socket, then a lingering close. */
export function answerExcess (socket: Socket, metrics: Pick<Metrics, 'errors'>, discarded?: (bytes: number) => void): void {
  // A reset by the caller after the answer is nobody's failure.
  socket.on('error', ignore)
  const linger = setTimeout(() => { socket.destroy() }, EXCESS_LINGER_MS).unref()
  socket.once('close', () => { clearTimeout(linger) })
  endOverloaded(socket, metrics)
  // Read and dropped like a shed request's body (a socket paused to wait for this resumes).
  socket.on('data', discarded === undefined ? ignore : (chunk: Buffer) => { discarded(chunk.length) })
  socket.resume()
}

/**
 * A plain bound on open connections (the admin listener's). `onExcess` is told of each
 * connection answered 503; `onShedding` when the first one beyond the bound arrives and when
 * one closes after that: one log line each way, however many are refused.
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
      if (!shedding) onShedding(shedding = true)
      return 'connections'
    },
    refused: onExcess,
    disconnect () {
      open -= 1
      if (shedding) onShedding(shedding = false)
    },
    open: () => open
  }
}
