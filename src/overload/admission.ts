// The first stage a request on the proxy port meets, from its head alone: too many header
// fields (431), then the overload manager's admission (503 OVERLOADED), then `100 Continue`
// for a caller that asked for it and will be served. Nothing of the body is read before this.
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { FastifyError, FastifyInstance } from 'fastify'
import { HeaderCountError, HeadersTooLargeError, OverloadedError, sendError } from '../http/errors.js'
import type { Metrics } from '../metrics.js'
import { observeExchange } from '../proxy/plugin.js'
import { OVERLOAD_RETRY_AFTER_S, type OverloadManager } from './manager.js'
import { HEADER_STRING_OVERHEAD_BYTES, keptHeads } from './waters.js'

export { HEADER_STRING_OVERHEAD_BYTES }
/**
 * A request's header fields are held three times while it is in flight: the raw list, the
 * headers object and the list sent upstream (forward.ts).
 */
export const HEADER_COPIES = 3

/** What a request's header fields cost while it is in flight (its raw list, names and values alternating). */
export function headerCost (rawHeaders: readonly string[]): number {
  let bytes = 0
  for (const text of rawHeaders) bytes += text.length + HEADER_STRING_OVERHEAD_BYTES
  return HEADER_COPIES * bytes
}

/**
 * What a request's trailer section may hold while it is in flight: a chunked body may end in
 * one, which Node's parser holds as it holds a head (up to MAX_HEADER_BYTES and the field
 * count) until it is whole; unfinished, it grows unseen (100 requests with an unfinished 1 MB
 * trailer OOM-killed a 128 MiB sidecar at MAX_HEADER_BYTES 1 MiB). Counted as an unfinished
 * head (waters.ts headCost) for each request whose body is chunked; none for the others.
 */
export function trailerCost (req: Pick<IncomingMessage, 'headers'>, headBytes: number): number {
  return hasChunkedBody(req) ? headBytes : 0
}

/** Whether a request's body is chunked, so may end in trailers (Node's parser refuses Transfer-Encoding other than chunked last). */
export const hasChunkedBody = (req: Pick<IncomingMessage, 'headers'>): boolean => req.headers['transfer-encoding'] !== undefined

/**
 * MAX_HEADER_COUNT, enforced twice. Node 24's parser fails a head with more fields than
 * `server.maxHeadersCount` (HPE_HEADER_OVERFLOW, as for too many bytes), so an unfinished head
 * never holds more fields than that: its fields are strings in JavaScript, and ~930 tiny ones held
 * ~70 KiB. Node versions that instead drop the fields beyond without a word still add
 * them 32 at a time while under the count: set one over the cap, a request over it shows more than
 * MAX_HEADER_COUNT fields in its raw list (tooManyHeaders) and is refused all the same, never
 * served with fields missing.
 */
export function limitHeaderCount (server: FastifyInstance, maxHeaderCount: number): void {
  server.server.maxHeadersCount = maxHeaderCount + 1
}

export const tooManyHeaders = (req: IncomingMessage, maxHeaderCount: number): boolean => req.rawHeaders.length > 2 * maxHeaderCount

/**
 * Which limit a head Node's parser refused as too large broke: its field count when the bytes
 * it got so far hold more lines than MAX_HEADER_COUNT, else its size. Counted byte by byte and
 * only as far as the count: a flood of heads of ~930 tiny lines each comes here for every
 * connection (one Buffer#indexOf a line cost 160 µs a head).
 */
export function headOverflowError (head: Buffer | undefined, maxHeaderCount: number, maxHeaderBytes: number): FastifyError {
  // The request line is not a field.
  const overCount = maxHeaderCount + 2
  let lines = 0
  if (head !== undefined) {
    for (let i = 0; i < head.length && lines < overCount; i++) if (head[i] === 0x0a) lines += 1
  }
  return lines >= overCount ? new HeaderCountError(maxHeaderCount) : new HeadersTooLargeError(maxHeaderBytes)
}

/**
 * A shed request's chunked body is read to be discarded, its trailers with it, which grow in the
 * parser uncounted (100 shed requests with unfinished 1 MB trailers OOM-killed a 128 MiB
 * sidecar). At most `max` are read at once (keptHeads: as many heads as the kept ones, 3 MiB);
 * `begin` says whether one more may be, and counts it until it closes: beyond, its connection
 * closes after the answer.
 */
export function boundChunkedDiscards (max: number): { begin: (req: IncomingMessage) => boolean, reading: () => number } {
  let reading = 0
  return {
    begin (req) {
      if (reading >= max) return false
      reading += 1
      req.once('close', () => { reading -= 1 })
      return true
    },
    reading: () => reading
  }
}

/** Requests that asked for `100 Continue` (RFC 9110 §10.1.1): it is sent only once they are admitted. */
const expectsContinue = new WeakSet<IncomingMessage>()

/**
 * Node answers `Expect: 100-continue` with 100 before any check unless the server listens for
 * 'checkContinue': listening, the request goes on as any other, marked, and admitRequests
 * sends the 100 only when it admits it and its announced length fits MAX_BODY_BYTES. Refused,
 * the caller gets the final status instead and is never invited to upload a body that would
 * be discarded; Node then closes the connection (the body may still be on its way).
 */
export function continueOnlyWhenAdmitted (server: FastifyInstance): void {
  const http = server.server
  http.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    expectsContinue.add(req)
    http.emit('request', req, res)
  })
}

export interface AdmissionOptions {
  overload: OverloadManager
  metrics: Metrics
  accessLog: boolean
  maxHeaderCount: number
  /** What one unfinished head holds (waters.ts headCost of MAX_HEADER_BYTES and MAX_HEADER_COUNT): a chunked request's trailers may hold as much (trailerCost). */
  headBytes: number
  /** MAX_BODY_BYTES: a longer announced body gets no 100 (the request path's body stage answers 413). */
  maxBodyBytes: number
  /** With tracing on: each decision, on the request's span (src/tracing/request.ts). */
  traced?: (res: ServerResponse, reason: string | undefined) => void
}

/**
 * The first thing a new request meets: over a memory water (its announced body, its header
 * fields and its trailers counted in advance) or the in-flight cap it gets 503 OVERLOADED here, before its body
 * is read, a token asked or a budget consulted, so nothing goes upstream and nothing is spent.
 * The caller gets a status line, never a dropped connection. A shed request's body is read and
 * discarded, keeping the connection, and the manager is told how much (OverloadManager.discarded):
 * discarded reads are garbage that only a collection frees.
 */
export function admitRequests (server: FastifyInstance, { overload, metrics, accessLog, maxHeaderCount, headBytes, maxBodyBytes, traced }: AdmissionOptions): void {
  const chunkedDiscards = boundChunkedDiscards(keptHeads(headBytes))
  server.addHook('onRequest', function admit (request, reply, done) {
    const req = request.raw
    if (tooManyHeaders(req, maxHeaderCount)) {
      observeExchange(request, reply.raw, metrics, accessLog)
      reply.header('connection', 'close')
      sendError(reply, new HeaderCountError(maxHeaderCount), metrics)
      return
    }
    // Node's parser has checked the header: digits only, one value.
    const bodyBytes = Number(request.headers['content-length'] ?? 0)
    const headerBytes = headerCost(req.rawHeaders) + trailerCost(req, headBytes)
    const reason = overload.admit(bodyBytes, headerBytes)
    traced?.(reply.raw, reason)
    if (reason === undefined) {
      reply.raw.once('close', () => { overload.leave(bodyBytes, headerBytes) })
      if (expectsContinue.has(req) && !(maxBodyBytes > 0 && bodyBytes > maxBodyBytes)) reply.raw.writeContinue()
      done()
      return
    }
    // Flowing from here: Node then does not read it again to discard it after the answer.
    req.on('data', (chunk: Buffer) => { overload.discarded(chunk.length) })
    if (hasChunkedBody(req) && !chunkedDiscards.begin(req)) reply.header('connection', 'close')
    // Counted and logged like every answer (the request path's own hook does not run for it).
    observeExchange(request, reply.raw, metrics, accessLog)
    sendError(reply, new OverloadedError(), metrics, { retryAfterSeconds: OVERLOAD_RETRY_AFTER_S })
  })
}
