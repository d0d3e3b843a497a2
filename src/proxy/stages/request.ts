// What the caller sent, the first stages of the request path. From the head alone (onRequest),
// refused before anything is read: TRACE (the upstream would echo the token back) and every
// method outside the forwarded set, whatever Fastify thinks of it (QUERY); a request target
// that is not a plain path below UPSTREAM_URL; headers that are not what they claim. Then the
// body (preHandler): its size checked against MAX_BODY_BYTES (up front when it says its
// length, as it streams when chunked), and a small one kept whole so the request can be
// replayed once after a 401, within a bound on what all requests together hold. The body is
// never parsed, decoded or re-encoded.
import type { IncomingMessage } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import { Transform } from 'node:stream'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { BadRequestError, BodyTooLargeError, MethodNotAllowedError } from '../../http/errors.js'
import { FORWARDED_METHODS, requestHeadersProblem, requestTargetProblem } from '../../http/rules.js'
import { DISCARD_BODY_MS, REPLAY_BODY_MAX_BYTES, REPLAY_BUFFER_TOTAL_BYTES, type Exchange } from '../exchange.js'

const FORWARDED = new Set<string>(FORWARDED_METHODS)

/** Why the request is refused from its head, or undefined: it goes on. */
export function headProblem (request: FastifyRequest): Error | undefined {
  if (!FORWARDED.has(request.method)) return new MethodNotAllowedError(request.method)
  const problem = requestTargetProblem(request.url) ?? requestHeadersProblem(request.raw.rawHeaders)
  if (problem !== undefined) return new BadRequestError(problem)
  // Fastify checks a Content-Type's syntax before any parser runs (415 for `foo`); the
  // type is the upstream's business. It is still forwarded: headers go from rawHeaders.
  delete request.raw.headers['content-type']
  return undefined
}

export function createBodyStage ({ maxBodyBytes }: { maxBodyBytes: number }) {
  let replayBytes = 0
  return {
    /** What an exchange held for its replay goes back when it closes. */
    release (exchange: Exchange): void {
      replayBytes -= exchange.reservedBytes
      exchange.reservedBytes = 0
    },

    /** Checks the body's size and keeps a small one for a replay; rejects with BODY_TOO_LARGE. */
    async read (request: FastifyRequest, reply: FastifyReply): Promise<void> {
      const body = request.body as Readable | undefined
      if (body === undefined) return
      discardAfterAnswer(request.raw, reply)
      const length = contentLength(request)
      if (maxBodyBytes > 0 && length !== undefined && length > maxBodyBytes) throw new BodyTooLargeError(maxBodyBytes)
      if (length !== undefined && length <= REPLAY_BODY_MAX_BYTES && replayBytes + length <= REPLAY_BUFFER_TOTAL_BYTES) {
        replayBytes += length
        request.exchange.reservedBytes = length
        request.replayBody = await readWhole(body)
        return
      }
      // A chunked body has no length to check up front: count it as it streams.
      if (maxBodyBytes > 0 && length === undefined) request.body = limitBytes(body, maxBodyBytes)
    }
  }
}

/**
 * An answer may go out while the caller is still sending its body (the upstream
 * answered early, or the sidecar refused it). Node then reads the rest and throws it
 * away, for as long as the caller sends: bound that, so a huge or endless upload
 * cannot hold the connection (and a graceful shutdown) open.
 */
function discardAfterAnswer (req: IncomingMessage, reply: FastifyReply): void {
  const socket: Duplex = req.socket
  reply.raw.once('finish', () => {
    if (req.complete || socket.destroyed) return
    const timer = setTimeout(() => { socket.destroy() }, DISCARD_BODY_MS).unref()
    req.once('end', () => { clearTimeout(timer) })
    // Stryker disable next-line BlockStatement,CallExpression,StringLiteral: equivalent: the timer left would only destroy a closed socket again (a no-op); it is unref'd
    socket.once('close', () => { clearTimeout(timer) })
  })
}

function contentLength (request: FastifyRequest): number | undefined {
  const value = request.headers['content-length']
  return value === undefined ? undefined : Number(value)
}

async function readWhole (stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

/** Passes a stream through, failing it with BODY_TOO_LARGE past `max` bytes; a caller's abort fails it too. */
function limitBytes (body: Readable, max: number): Transform {
  let seen = 0
  const limited = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      seen += chunk.length
      callback(seen > max ? new BodyTooLargeError(max) : null, chunk)
    }
  })
  body.once('error', (err) => { limited.destroy(err) })
  return body.pipe(limited)
}
