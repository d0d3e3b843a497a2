import type { ServerResponse } from 'node:http'
import type { Readable } from 'node:stream'
import type { Dispatcher } from 'undici'
import { callerResponseHeaders } from './http-rules.js'

export interface UpstreamRequest {
  method: string
  /** Path and query, as they go on the wire. */
  path: string
  headers: Record<string, string | string[] | undefined>
  body: Readable | Buffer | null
}

export interface ForwardHooks {
  /** The upstream answered `statusCode`: return true to hold that answer back (its body is drained, not sent). */
  holdBack: (statusCode: number) => boolean
  /** The held-back answer has been drained: the caller still waits for an answer. */
  afterHeldBack: () => void
  /** The upstream failed before anything was sent to the caller: the caller still waits for an answer. */
  failed: (err: Error) => void
  /** The upstream's answer is being written to the caller, directly from here on. */
  started: () => void
}

/**
 * One request to the upstream through undici's dispatch API, its answer written
 * straight to the caller's response: status, end-to-end headers, and the body chunk
 * by chunk with backpressure both ways. No intermediate stream, no copy of the body
 * (bench/README.md: this path costs about half the CPU of piping through
 * @fastify/reply-from). A caller that goes away aborts the upstream request; an
 * upstream that fails mid-answer destroys the caller's connection, so a truncated
 * body is never passed off as complete.
 */
export function forward (dispatcher: Dispatcher, request: UpstreamRequest, res: ServerResponse, hooks: ForwardHooks): void {
  let heldBack = false
  let controller: Dispatcher.DispatchController | undefined
  const callerGone = (): void => { controller?.abort(new Error('the caller closed the connection')) }
  const done = (): void => { res.removeListener('close', callerGone) }
  res.once('close', callerGone)

  dispatcher.dispatch(request, {
    onRequestStart (c) {
      controller = c
    },
    onResponseStart (c, statusCode, headers) {
      // An interim answer (103 Early Hints) is not the answer: wait for the final one.
      if (statusCode < 200) return
      if (hooks.holdBack(statusCode)) {
        heldBack = true
        return
      }
      try {
        res.writeHead(statusCode, callerResponseHeaders(headers))
      } catch (err) {
        // A status or header value Node refuses to send: the answer is not valid HTTP.
        c.abort(err as Error)
        return
      }
      hooks.started()
    },
    onResponseData (c, chunk) {
      if (heldBack) return
      if (!res.write(chunk)) {
        c.pause()
        res.once('drain', () => { c.resume() })
      }
    },
    onResponseEnd () {
      done()
      if (heldBack) hooks.afterHeldBack()
      else res.end()
    },
    onResponseError (_c, err) {
      done()
      if (res.headersSent) res.destroy(err)
      else if (!res.destroyed) hooks.failed(err)
    }
  })
}
