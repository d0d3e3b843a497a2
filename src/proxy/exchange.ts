// One caller's exchange as every stage of the request path sees it: what is known of it from
// arrival to the close of its answer, the request's decorations the stages hand on, the few
// facts each stage reads (is the caller still there, what path goes upstream), and how an
// error of any stage becomes the caller's answer.
import type { ServerResponse } from 'node:http'
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { BadRequestError, InternalError, isOwnError, sendError } from '../http/errors.js'
import { methodLabel, statusClass, type Metrics, type Outcome } from '../metrics.js'
import type { Fill } from '../cache/fill.js'
import type { Token } from '../token/token-manager.js'

/** What the sidecar knows about one caller's exchange, from arrival to the close of its answer. */
export interface Exchange {
  /** The caller's connection closed before its answer ended. */
  gone: boolean
  /** The upstream failed mid-answer and the caller's connection was cut. */
  truncated: boolean
  /** Bytes of REPLAY_BUFFER_TOTAL_BYTES this request holds. */
  reservedBytes: number
}

declare module 'fastify' {
  interface FastifyRequest {
    exchange: Exchange
    /** The token this request is forwarded with: set by the token stage before it is sent. */
    token: Token | null
    /** A small body kept whole, so the request can be replayed once after a 401. */
    replayBody: Buffer | null
    /** The upstream path http-proxy resolved, for the replay. */
    upstreamPath: string | null
    /** Whether this request was already replayed with a fresh token. */
    replayed: boolean
    /** A GET of a rule with cache= that goes upstream: what it may store, and who waits for it. */
    fill: Fill | null
  }
}

/**
 * Bodies up to this size are read whole before forwarding so that a request
 * rejected with 401 (a token revoked early) can be replayed once with a new token.
 * Larger bodies stream through and a 401 goes back to the caller.
 */
export const REPLAY_BODY_MAX_BYTES = 64 * 1024
/**
 * At most this much is held for replays at once, whatever the number of callers:
 * beyond it, small bodies stream like large ones (bounding the memory a burst of
 * uploads can take; the Helm chart's memory limit relies on it).
 */
export const REPLAY_BUFFER_TOTAL_BYTES = 8 * 1024 * 1024
/**
 * After the answer to a request whose body is still arriving (an upstream that
 * answered early, e.g. its own 413), the rest of the body is read and discarded for
 * at most this long, so the caller can read the answer, then the connection is closed.
 */
export const DISCARD_BODY_MS = 2_000

/**
 * Counts and logs one exchange when its answer closes, finished or not: the status
 * line actually sent (none when the caller got none) and how the exchange ended.
 * Used by the request path's onRequest hook and for the answers Fastify makes
 * before any route runs (bad URL, CONNECT).
 */
export function observeExchange (
  request: FastifyRequest, res: ServerResponse, metrics: Metrics, accessLog: boolean, release: (exchange: Exchange) => void = () => {}
): Exchange {
  const exchange: Exchange = { gone: false, truncated: false, reservedBytes: 0 }
  const started = performance.now()
  metrics.requestsInFlight.inc()
  res.once('close', () => {
    metrics.requestsInFlight.dec()
    const durationMs = performance.now() - started
    const status = res.headersSent ? res.statusCode : undefined
    const outcome: Outcome = res.writableFinished ? 'completed' : exchange.truncated ? 'truncated' : 'aborted'
    if (outcome !== 'completed') exchange.gone = true
    release(exchange)
    metrics.recordExchange(methodLabel(request.method), statusClass(status), outcome, durationMs / 1000)
    if (accessLog) {
      request.log.info({
        method: request.method,
        url: request.url,
        statusCode: status ?? null,
        outcome,
        durationMs: Math.round(durationMs * 10) / 10
      }, 'request')
    }
  })
  return exchange
}

/** The path and query as they go upstream. */
export function forwardedPath (request: FastifyRequest): string {
  // Stryker disable next-line StringLiteral: unreachable fallback: a request on Node's server always has its URL
  const url = request.raw.url ?? '/'
  const queryAt = url.indexOf('?')
  // Stryker disable next-line StringLiteral: unreachable fallback: http-proxy's handler sets upstreamPath before any forwarding
  return (request.upstreamPath ?? '/') + (queryAt === -1 ? '' : url.slice(queryAt))
}

/**
 * Whether the caller's connection is gone (it may not have been noticed by the exchange yet), or
 * can no longer carry an answer: Node ends it as the caller closes its side, and closes the
 * response a turn later (the upstream's exchange reads it the same way, forward-handler.ts).
 */
export function callerGone (request: FastifyRequest): boolean {
  const socket = request.raw.socket
  return request.exchange?.gone === true || socket?.destroyed === true || socket?.writable === false
}

/**
 * An error of any stage as the caller's answer: the sidecar's own (http/errors.ts), a 500 for what
 * failed unexpectedly (logged), or a plain 400 for Fastify's or a plugin's own 4xx. A caller
 * already gone gets nothing, and it is not a failure of ours.
 */
export function createAnswers ({ metrics }: { metrics: Metrics }) {
  return {
    fail (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
      // A caller that left mid-upload is ordinary client behaviour, not a failure of ours.
      if (callerGone(request)) {
        request.log.debug({ code: error.code, reason: error.message }, 'caller closed the connection before its request was sent')
        return
      }
      if (isOwnError(error)) {
        sendError(reply, error, metrics)
      } else if ((error.statusCode ?? 500) >= 500) {
        request.log.error({ err: error }, 'request failed')
        sendError(reply, new InternalError(), metrics)
      } else {
        // Fastify's or a plugin's own 4xx: its code and message (which may echo the URL) stay in the log.
        request.log.debug({ code: error.code, reason: error.message }, 'request refused')
        sendError(reply, new BadRequestError('the request is malformed'), metrics)
      }
    }
  }
}
