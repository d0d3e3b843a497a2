import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { Pool, type Dispatcher } from 'undici'
import { absoluteFormRequest, egressConnection, refusingProxyAuth } from '../egress/connection.js'
import type { Route } from '../egress/route.js'
import { UpstreamBusyError } from '../http/errors.js'
import { ForwardHandler, type ForwardContext, type ForwardHooks, type HeldAnswer, type UpstreamRequest } from './forward-handler.js'
import { createResetWatch, guardUpstreamSocket } from './socket-internals.js'

// The exchange's contract lives with its handler; importers keep reaching it from here.
export { HOLD_BACK_MAX_BYTES, type ForwardHooks, type HeldAnswer, type UpstreamRequest } from './forward-handler.js'

export interface UpstreamOptions {
  url: string
  connections: number
  connectTimeoutMs: number
  /** For the final answer's status line, and for every pause within its body. */
  timeoutMs: number
  /** How many requests may wait for a connection; more get 503 UPSTREAM_BUSY at once. */
  queueLimit: number
  /** How long a request may wait for a connection before it gets 503 UPSTREAM_BUSY. */
  queueTimeoutMs: number
  /** Reports how many requests wait for a connection. */
  queueGauge?: { inc: () => void, dec: () => void }
  /** Through the egress proxy, or direct (the default). */
  route?: Route
}

/**
 * The upstream: one keep-alive pool, with a bounded wait for a connection, and one
 * request at a time through undici's dispatch API, its answer written straight to
 * the caller's response: status, end-to-end headers, and the body chunk by chunk
 * with backpressure both ways (bench/README.md: half the CPU of piping through
 * @fastify/reply-from). Each exchange is a ForwardHandler (forward-handler.ts), whose
 * phase says where it is: queued, expired, sent, holding, streaming or done.
 *
 * Guarantees: a request whose caller has gone before it reached a connection is
 * never written to one; a request that waited too long for a connection is never
 * sent and its caller gets 503; an upstream that fails mid-answer cuts the caller's
 * connection, so a truncated body is never passed off as complete.
 */
export function createUpstream (options: UpstreamOptions) {
  const { url, connections, connectTimeoutMs, timeoutMs, queueLimit, queueTimeoutMs, queueGauge, route = { via: 'direct', why: 'no proxy set' } } = options

  // A reset that undici takes for the end of an answer, seen (src/upstream/socket-internals.ts).
  const resets = createResetWatch()
  // Direct, or through the egress proxy (a CONNECT tunnel, or the absolute form to the
  // egress proxy's origin for plain HTTP); TLS to the upstream verified either way. The socket
  // guards apply to the socket undici reads the answer from, tunnelled or not.
  const egress = egressConnection(url, route, { connectTimeoutMs })
  const absoluteForm = egress.absoluteForm
  const pool = new Pool(egress.origin, {
    connections,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connect (connectOptions, callback) {
      egress.connect(connectOptions, (...args) => {
        const socket = args[1]
        if (socket != null) guardUpstreamSocket(socket as Socket, resets)
        callback(...args)
      })
    }
  })

  const dispatch = absoluteForm === undefined
    ? (request: UpstreamRequest, handler: Dispatcher.DispatchHandler) => pool.dispatch(request, handler)
    : (request: UpstreamRequest, handler: Dispatcher.DispatchHandler) =>
        pool.dispatch(absoluteFormRequest(request, absoluteForm), refusingProxyAuth(handler))

  let queued = 0

  /** Whether every connection is open and busy: only then is waiting for one "busy". */
  function saturated (): boolean {
    const stats = pool.stats
    return stats.connected >= connections && stats.free === 0
  }

  const context: ForwardContext = {
    saturated,
    enterQueue: () => { queued += 1; queueGauge?.inc() },
    leaveQueue: () => { queued -= 1; queueGauge?.dec() },
    queueTimeoutMs,
    timeoutMs,
    resets
  }

  function forward (request: UpstreamRequest, res: ServerResponse, hooks: ForwardHooks): void {
    if (queued >= queueLimit && saturated()) {
      hooks.unsent?.()
      hooks.failed(new UpstreamBusyError())
      return
    }
    const handler = new ForwardHandler(request.method, res, hooks, context)
    dispatch(request, handler)
    // A request that found a free connection is on it by now (at once, or a microtask later
    // for a streamed body): only one still waiting needs the queue's timer.
    queueMicrotask(() => { handler.armQueueTimer() })
  }

  return {
    forward,
    /** Requests waiting for a connection. */
    queued: () => queued,
    close: async () => { await Promise.all([pool.close(), egress.close()]) }
  }
}

export type Upstream = ReturnType<typeof createUpstream>

/** Sends a held-back answer to the caller after all. */
export function sendHeld (res: ServerResponse, answer: HeldAnswer): void {
  try {
    res.writeHead(answer.statusCode, answer.headers)
  } catch (err) {
    res.destroy(err as Error)
    return
  }
  res.end(answer.body)
}
