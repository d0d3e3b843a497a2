import type { ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import { Pool, type Dispatcher } from 'undici'
import { absoluteFormRequest, egressConnection, refusingProxyAuth } from '../egress/connection.js'
import type { Route } from '../egress/route.js'
import { UpstreamBadResponseError, UpstreamBusyError } from '../errors.js'
import { callerResponseHeaders } from '../http/rules.js'
import { createResetWatch, guardUpstreamSocket } from './socket-internals.js'

export interface UpstreamRequest {
  method: string
  /** Path and query, as they go on the wire. */
  path: string
  /** Flat name/value list, in the caller's order and spelling (see http-rules.ts). */
  headers: string[]
  body: Readable | Buffer | null
}

/** The upstream's final answer, read whole instead of being sent (see ForwardHooks.holdBack). */
export interface HeldAnswer {
  statusCode: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

export interface ForwardHooks {
  /** The upstream's final answer began (status and headers), before holdBack is asked. */
  answer?: (statusCode: number, headers: HeldAnswer['headers']) => void
  /**
   * The upstream answered `statusCode`: return true (or a byte limit) to hold the answer
   * back. It is then read whole (up to HOLD_BACK_MAX_BYTES, or the limit given; past that
   * it is sent after all) and handed to `heldBack` instead of being written to the caller.
   */
  holdBack: (statusCode: number) => boolean | number
  /**
   * The answer is wanted by others than this caller (a read-cache fill): once the request is
   * written, the caller leaving does not abort it. A held answer still reaches `heldBack`,
   * and a failure `failed`, with the caller gone; one that would stream to it is aborted.
   */
  outlivesCaller?: boolean
  /** The held-back answer, complete: the caller still waits for an answer. */
  heldBack: (answer: HeldAnswer) => void
  /**
   * Nothing of the request was or will be written to the upstream: refused before dispatch
   * (UPSTREAM_BUSY), dropped from the queue (its caller left, or it waited too long), or its
   * connection failed before the request was written (refused, DNS, TLS). Called at most once,
   * before `failed` when both apply. The quota guard gives the budget point back.
   */
  unsent?: () => void
  /** Nothing was sent to the caller and nothing will be: the caller still waits for an answer. */
  failed: (err: Error) => void
  /** The upstream's answer is being written to the caller, directly from here on. */
  started: () => void
  /** The upstream failed after the status line went out: the caller's connection is cut. */
  truncated: () => void
}

/** A held-back answer (a 401 that may be replayed) larger than this is sent as it comes. */
export const HOLD_BACK_MAX_BYTES = 64 * 1024

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

const statusOnly = (statusCode: number): boolean => statusCode === 204 || statusCode === 304

/**
 * The upstream: one keep-alive pool, with a bounded wait for a connection, and one
 * request at a time through undici's dispatch API, its answer written straight to
 * the caller's response: status, end-to-end headers, and the body chunk by chunk
 * with backpressure both ways (bench/README.md: half the CPU of piping through
 * @fastify/reply-from).
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
  // proxy's origin for plain HTTP); TLS to the upstream verified either way. The socket
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

  function forward (request: UpstreamRequest, res: ServerResponse, hooks: ForwardHooks): void {
    if (queued >= queueLimit && saturated()) {
      hooks.unsent?.()
      hooks.failed(new UpstreamBusyError())
      return
    }
    /** undici began writing the request to a connection (onRequestStart): from here on it may have reached the upstream. */
    let written = false
    let givenBack = false
    const giveBack = (): void => {
      if (written || givenBack) return
      givenBack = true
      hooks.unsent?.()
    }
    let waiting = true
    let expired = false
    // A caller already gone: its request is dropped unsent, but for a cache fill's replay
    // (outlivesCaller), which its waiters need and whose budget point is taken.
    const goneAlready = res.destroyed
    let callerLeft = goneAlready
    let controller: Dispatcher.DispatchController | undefined
    let startedAt = 0
    let finalTimer: NodeJS.Timeout | undefined
    let queueTimer: NodeJS.Timeout | undefined
    let held: { statusCode: number, headers: HeldAnswer['headers'], chunks: Buffer[], bytes: number, limit: number } | undefined
    const outlives = hooks.outlivesCaller === true
    // Stryker disable next-line BooleanLiteral: equivalent: set at the final answer's head, before onResponseEnd reads it
    let closeDelimited = false

    queued += 1
    queueGauge?.inc()
    const leaveQueue = (): void => {
      if (!waiting) return
      waiting = false
      queued -= 1
      queueGauge?.dec()
      clearTimeout(queueTimer)
    }
    const expire = (): void => {
      if (!waiting) return
      // Still connecting rather than waiting for a busy connection: the connect timeout bounds that.
      if (!saturated()) {
        queueTimer = setTimeout(expire, queueTimeoutMs)
        return
      }
      expired = true
      leaveQueue()
      giveBack()
      hooks.failed(new UpstreamBusyError())
    }

    const callerGone = (): void => {
      callerLeft = true
      giveBack()
      // Still queued: it is dropped when it reaches a connection (onRequestStart), unsent.
      // Written, and wanted by others: read on, unless it is already streaming to this caller.
      if (!outlives || (controller !== undefined && held === undefined && res.headersSent)) {
        // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (its caller has gone)
        controller?.abort(new Error('the caller closed the connection'))
      }
    }
    const done = (): void => {
      leaveQueue()
      // Stryker disable next-line CallExpression: equivalent: the timer is cleared at the final answer's head; without one, its abort meets a request already over
      clearTimeout(finalTimer)
      // Stryker disable next-line StringLiteral: equivalent: a callerGone left behind only gives back what was written (nothing) and aborts a request already over
      res.removeListener('close', callerGone)
    }
    res.once('close', callerGone)

    /** Writes the status line and headers; false if Node refuses them (not valid HTTP). */
    const writeHead = (c: Dispatcher.DispatchController, statusCode: number, headers: HeldAnswer['headers']): boolean => {
      try {
        res.writeHead(statusCode, callerResponseHeaders(headers))
      } catch (err) {
        c.abort(new UpstreamBadResponseError({ cause: err }))
        return false
      }
      hooks.started()
      return true
    }

    const write = (c: Dispatcher.DispatchController, chunk: Buffer): void => {
      if (!res.write(chunk)) {
        c.pause()
        res.once('drain', () => { c.resume() })
      }
    }

    dispatch(request, {
      onRequestStart (c) {
        // Dropped before a single byte is written, if its caller has gone or was answered 503.
        if (expired || (callerLeft && !(outlives && goneAlready))) {
          giveBack()
          // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (nothing was sent)
          c.abort(new Error('the request left the queue unsent'))
          return
        }
        written = true
        leaveQueue()
        controller = c
        startedAt = performance.now()
      },
      onResponseStart (c, statusCode, headers) {
        if (statusCode < 100 || statusCode > 999) {
          c.abort(new UpstreamBadResponseError())
          return
        }
        // An interim answer (103 Early Hints) is not the answer: wait for the final one. undici's
        // headersTimeout restarts on each; from the first on, this timer bounds the final answer.
        if (statusCode < 200) {
          finalTimer ??= setTimeout(() => {
            // Stryker disable next-line StringLiteral: wording: the code decides the answer (504), the message is only logged
            c.abort(Object.assign(new Error('no final answer in time'), { code: 'UND_ERR_HEADERS_TIMEOUT' }))
          }, Math.max(0, timeoutMs - (performance.now() - startedAt)))
          return
        }
        clearTimeout(finalTimer)
        hooks.answer?.(statusCode, headers)
        closeDelimited = headers['content-length'] === undefined && headers['transfer-encoding'] === undefined &&
          // Stryker disable next-line ConditionalExpression,StringLiteral: equivalent: a HEAD answer and a 204 or 304 end at their head, so undici never ends them on a reset
          request.method !== 'HEAD' && !statusOnly(statusCode)
        const hold = hooks.holdBack(statusCode)
        if (hold !== false) {
          held = { statusCode, headers, chunks: [], bytes: 0, limit: hold === true ? HOLD_BACK_MAX_BYTES : hold }
          return
        }
        if (callerLeft) {
          // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (its caller has gone)
          c.abort(new Error('the caller closed the connection'))
          return
        }
        writeHead(c, statusCode, headers)
      },
      onResponseData (c, chunk) {
        if (held !== undefined) {
          held.chunks.push(chunk)
          held.bytes += chunk.length
          if (held.bytes <= held.limit) return
          // Too large to hold: send it as it comes after all (if anyone still waits for it).
          const { statusCode, headers, chunks } = held
          held = undefined
          // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (its caller has gone)
          if (callerLeft) c.abort(new Error('the caller closed the connection'))
          else if (writeHead(c, statusCode, headers)) for (const part of chunks) write(c, part)
          return
        }
        write(c, chunk)
      },
      onResponseEnd () {
        const reset = resets.resetting()
        done()
        if (closeDelimited && reset) {
          if (!res.headersSent) {
            // A held-back answer that was cut: nothing went out, the caller still gets a 502.
            // Stryker disable next-line StringLiteral: wording: the code decides the answer (502), the message is only logged
            hooks.failed(Object.assign(new Error('the upstream reset the connection mid-answer'), { code: 'ECONNRESET' }))
            return
          }
          hooks.truncated()
          res.flushHeaders()
          res.destroy()
          return
        }
        if (held !== undefined) hooks.heldBack({ statusCode: held.statusCode, headers: callerResponseHeaders(held.headers), body: Buffer.concat(held.chunks) })
        else res.end()
      },
      onResponseError (_c, err) {
        done()
        giveBack()
        if (expired) return
        // Others wait for this answer: they are told it failed, whatever became of this caller.
        if (callerLeft) {
          if (outlives) hooks.failed(err)
          return
        }
        if (res.headersSent) {
          hooks.truncated()
          // The status line may still sit in Node's buffer (it goes out with the first body
          // bytes): send it, so the caller sees the answer begun and then cut.
          res.flushHeaders()
          res.destroy(err)
          // Stryker disable next-line ConditionalExpression: equivalent here: proxy.ts's failed returns at once for a caller whose connection is gone
        } else if (!res.destroyed) {
          hooks.failed(err)
        }
      }
    })
    // A request that found a free connection is on it by now (at once, or a microtask later
    // for a streamed body): only one still waiting needs the queue's timer.
    queueMicrotask(() => { if (waiting && !expired) queueTimer = setTimeout(expire, queueTimeoutMs) })
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
