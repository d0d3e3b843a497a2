import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

/** The header a generated request carries so the upstream can tell requests apart (and see duplicates). */
export const ID_HEADER = 'x-gen-id'

/** Exactly what reached the upstream for one request. */
export interface Recorded {
  id: string
  method: string
  /** The request target as received (Node keeps its bytes, latin1). */
  url: string
  /** Header names and values as received, duplicates and case included. */
  rawHeaders: string[]
  /** The body bytes received so far. */
  body: () => Buffer
  /** Whether the whole body arrived (its framing ended cleanly). */
  complete: boolean
  /** The request is over for the upstream (read whole, or cut off): `body` and `complete` are final. */
  closed: boolean
}

export type Framing = 'length' | 'chunked' | 'close' | 'none'

/** A well-formed answer: status, header list (raw names, duplicates allowed) and body, in the framing chosen. */
export interface Answer {
  status: number
  headers: Array<[string, string]>
  body: Buffer
  framing: Framing
}

/** What the upstream does with one request: chosen per request id by the test. */
export type Behaviour =
  | { kind: 'answer', answer: Answer }
  /** Answers at once, before reading the body; `then` says what becomes of the unread body. */
  | { kind: 'early', answer: Answer, then: 'close' | 'drain' }
  /** Sends the head and `sendBytes` of a larger body, then ends the connection cleanly (`fin`) or with a reset. */
  | { kind: 'cut', framing: 'length' | 'chunked' | 'close', sendBytes: number, how: 'fin' | 'reset' }
  /** Resets the connection before answering. */
  | { kind: 'reset' }
  /** Never answers. */
  | { kind: 'stall' }
  /** `count` interim answers `every` ms apart, then `final` (or nothing, ever). */
  | { kind: 'interim', code: 100 | 103, count: number | 'forever', everyMs: number, final: Answer | null }
  /** These bytes, which are not valid HTTP, then the connection closed. */
  | { kind: 'invalid', bytes: Buffer }
  /** 401 to the first attempt of this id (a token the gateway rejects), `answer` to later ones. */
  | { kind: 'unauthorized', answer: Answer }
  /** Holds the request (no answer) until `release()` or the caller side goes away. */
  | { kind: 'hold' }

export const APIGEE_401: Answer = {
  status: 401,
  headers: [['Content-Type', 'application/json']],
  body: Buffer.from('{"fault":{"faultstring":"Invalid access token","detail":{"errorcode":"oauth.v2.InvalidAccessToken"}}}'),
  framing: 'length'
}

const REASONS: Record<number, string> = { 100: 'Continue', 103: 'Early Hints', 200: 'OK', 401: 'Unauthorized', 413: 'Payload Too Large' }

/** The head and body of an answer as bytes on the wire. `Connection: close` when the framing is the close. */
export function answerBytes (answer: Answer, { head = false, close = false } = {}): Buffer {
  const lines = [`HTTP/1.1 ${answer.status} ${REASONS[answer.status] ?? 'Status'}`]
  for (const [name, value] of answer.headers) lines.push(`${name}: ${value}`)
  const bodyless = head || answer.status === 204 || answer.status === 304 || answer.framing === 'none'
  if (answer.framing === 'length') lines.push(`Content-Length: ${answer.body.length}`)
  if (answer.framing === 'chunked') lines.push('Transfer-Encoding: chunked')
  if (answer.framing === 'close' || close) lines.push('Connection: close')
  const headBytes = Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1')
  if (bodyless) return headBytes
  if (answer.framing === 'chunked') {
    const chunk = answer.body.length === 0
      ? Buffer.alloc(0)
      : Buffer.concat([Buffer.from(answer.body.length.toString(16) + '\r\n'), answer.body, Buffer.from('\r\n')])
    return Buffer.concat([headBytes, chunk, Buffer.from('0\r\n\r\n')])
  }
  return Buffer.concat([headBytes, answer.body])
}

/**
 * A real HTTP upstream on port 0 (node:http parses the requests) that records every
 * request exactly and behaves, per request id, as the test planned: a normal
 * answer, an early answer, a connection cut or reset mid-body, a stall, interim
 * answers, invalid bytes, a 401, or a hold. Every answer is written as raw bytes on
 * the socket, so the test controls framing and validity; every answer but a
 * length- or chunk-framed one closes the connection.
 */
export async function startRecordingUpstream (t: Test) {
  const plans = new Map<string, Behaviour>()
  const received: Recorded[] = []
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()
  const held: Socket[] = []
  const defaultAnswer: Answer = { status: 200, headers: [['Content-Type', 'text/plain']], body: Buffer.from('ok'), framing: 'length' }

  const later = (ms: number, fn: () => void): void => {
    const timer = setTimeout(() => { timers.delete(timer); fn() }, ms)
    timers.add(timer)
  }

  const server = createServer((req: IncomingMessage, _res: ServerResponse) => {
    const id = String(req.headers[ID_HEADER] ?? '')
    const chunks: Buffer[] = []
    const entry: Recorded = {
      id, method: req.method ?? '', url: req.url ?? '', rawHeaders: [...req.rawHeaders], body: () => Buffer.concat(chunks), complete: false, closed: false
    }
    received.push(entry)
    const attempts = received.filter((r) => r.id === id).length
    req.on('data', (c: Buffer) => { chunks.push(c) })
    req.on('end', () => { entry.complete = true })
    req.on('close', () => { entry.closed = true })
    const socket = req.socket
    const behaviour = plans.get(id) ?? { kind: 'answer', answer: defaultAnswer }
    const isHead = req.method === 'HEAD'
    const afterBody = (fn: () => void): void => {
      if (req.readableEnded) fn()
      else req.once('end', fn)
    }
    const write = (bytes: Buffer): void => { if (!socket.destroyed) socket.write(bytes) }

    switch (behaviour.kind) {
      case 'answer':
      case 'unauthorized': {
        const answer = behaviour.kind === 'unauthorized' && attempts === 1 ? APIGEE_401 : behaviour.answer
        afterBody(() => {
          write(answerBytes(answer, { head: isHead }))
          if (answer.framing === 'close') socket.end()
        })
        return
      }
      case 'early':
        write(answerBytes(behaviour.answer, { head: isHead, close: true }))
        if (behaviour.then === 'close') socket.end()
        else afterBody(() => { socket.end() })
        return
      case 'cut':
        afterBody(() => {
          const framingLine = { length: `Content-Length: ${behaviour.sendBytes + 1000}`, chunked: 'Transfer-Encoding: chunked', close: 'Connection: close' }
          const headOnly = Buffer.from(`HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n${framingLine[behaviour.framing]}\r\n\r\n`, 'latin1')
          const data = Buffer.alloc(behaviour.sendBytes, 0x61)
          write(headOnly)
          if (behaviour.framing === 'chunked') {
            if (data.length > 0) write(Buffer.concat([Buffer.from(data.length.toString(16) + '\r\n'), data, Buffer.from('\r\n')]))
          } else {
            write(data)
          }
          // Let the bytes reach the other side before the connection goes: a reset
          // discards what the peer has not read yet.
          later(100, () => {
            if (behaviour.how === 'reset') socket.resetAndDestroy()
            else socket.end()
          })
        })
        return
      case 'reset':
        socket.resetAndDestroy()
        return
      case 'stall':
        return
      case 'hold':
        held.push(socket)
        return
      case 'interim':
        afterBody(() => {
          let sent = 0
          const tick = (): void => {
            if (socket.destroyed) return
            if (behaviour.count !== 'forever' && sent >= behaviour.count) {
              if (behaviour.final !== null) {
                write(answerBytes(behaviour.final, { head: isHead, close: true }))
                socket.end()
              }
              return
            }
            sent += 1
            write(Buffer.from(behaviour.code === 103
              ? 'HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n'
              : 'HTTP/1.1 100 Continue\r\n\r\n', 'latin1'))
            later(behaviour.everyMs, tick)
          }
          tick()
        })
        return
      case 'invalid':
        afterBody(() => {
          write(behaviour.bytes)
          socket.end()
        })
    }
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket) })
    // A reset from the other side is part of the tests, not a failure of the upstream.
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const timer of timers) clearTimeout(timer)
    for (const socket of sockets) socket.destroy()
    server.close(() => { resolve() })
  }))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    received,
    plan: (id: string, behaviour: Behaviour) => { plans.set(id, behaviour) },
    /** The requests that reached the upstream with this id. */
    seen: (id: string) => received.filter((r) => r.id === id),
    /** Every request with this id that reached the upstream is over (read whole or cut off). */
    over: (id: string) => received.every((r) => r.id !== id || r.closed),
    /** How many held requests are waiting. */
    holding: () => held.filter((s) => !s.destroyed).length,
    /** Destroys every held connection (the held requests never get an answer). */
    releaseHeld: () => { for (const s of held.splice(0)) s.destroy() }
  }
}

export type RecordingUpstream = Awaited<ReturnType<typeof startRecordingUpstream>>
