// One request's exchange with the upstream, as undici's dispatch handler: it waits for a
// connection, is written to it, and its answer is either held back (read whole) or streamed
// to the caller. Where it is, is its phase; the caller may leave in any of them.
import type { ServerResponse } from 'node:http'
import type { Readable } from 'node:stream'
import type { Dispatcher } from 'undici'
import { UpstreamBadResponseError, UpstreamBusyError } from '../http/errors.js'
import { callerResponseHeaders } from '../http/rules.js'
import type { ResetWatch } from './socket-internals.js'

export interface UpstreamRequest {
  method: string
  /** Path and query, as they go on the wire. */
  path: string
  /** Flat name/value list, in the caller's order and spelling (see http-rules.ts). */
  headers: string[]
  body: Readable | Buffer | null
}

/** The upstream's final answer, read whole instead of being sent (see ForwardHooks.holds). */
export interface HeldAnswer {
  statusCode: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

export interface ForwardHooks {
  /** The upstream's final answer began (status and headers), before `holds` is asked. */
  answer?: (statusCode: number, headers: HeldAnswer['headers']) => void
  /**
   * The upstream answered `statusCode`: return true (or a byte limit) to hold the answer
   * back. It is then read whole (up to HOLD_BACK_MAX_BYTES, or the limit given; past that
   * it is sent after all) and handed to `held` instead of being written to the caller.
   */
  holds: (statusCode: number) => boolean | number
  /**
   * The answer is wanted by others than this caller (a read-cache fill): once the request is
   * written, the caller leaving does not abort it. A held answer still reaches `held`,
   * and a failure `failed`, with the caller gone; one that would stream to it is aborted.
   */
  outlivesCaller?: boolean
  /** The held-back answer, complete: the caller still waits for an answer. */
  held: (answer: HeldAnswer) => void
  /**
   * Nothing of the request was or will be written to the upstream: refused before dispatch
   * (UPSTREAM_BUSY), dropped from the queue (its caller left, or it waited too long), or its
   * connection failed before the request was written (refused, DNS, TLS). Called at most once,
   * before `failed` when both apply. The quota guard gives the budget point back.
   */
  unsent?: () => void
  /**
   * The request is about to be written to the upstream (it has its connection; nothing of it
   * went out yet): called at most once. The quota guard times its send from here. An error
   * returned stops it: nothing is written, `unsent` follows, then `failed` with that error.
   */
  sending?: () => Error | undefined
  /** Nothing was sent to the caller and nothing will be: the caller still waits for an answer. */
  failed: (err: Error) => void
  /**
   * An exchange that outlives its caller: TI's answer, not held back, was not read on because
   * its caller had left (instead of `failed`: nothing failed at TI's end).
   */
  dropped?: () => void
  /** The upstream's answer is being written to the caller, directly from here on. */
  started: () => void
  /** The upstream failed after the status line went out: the caller's connection is cut. */
  truncated: () => void
}

/** A held-back answer (a 401 that may be replayed) larger than this is sent as it comes. */
export const HOLD_BACK_MAX_BYTES = 64 * 1024

/** What the exchanges of one upstream share: its wait for a connection, its timeouts, its reset watch. */
export interface ForwardContext {
  /** Whether every connection is open and busy: only then is waiting for one "busy". */
  saturated: () => boolean
  /** A request begins to wait for a connection (the pool's count and gauge). */
  enterQueue: () => void
  /** It no longer waits: it reached a connection, expired, or ended. */
  leaveQueue: () => void
  queueTimeoutMs: number
  /** Bounds the final answer's status line (from the request's start, past interim answers). */
  timeoutMs: number
  resets: ResetWatch
}

/**
 * Where an exchange is. It starts 'queued' and ends 'done'; its caller leaving is apart
 * (it may happen in any phase).
 * - queued: waits for a connection, counted in the pool's queue; the queue's timer bounds the wait.
 * - expired: waited too long: its caller got 503 and it is dropped unsent if it reaches a connection.
 * - sent: on a connection (undici began writing it: it may have reached the upstream); nothing passed on yet.
 * - holding: the final answer is read whole, for `held`, instead of going to the caller.
 * - streaming: the final answer's head went to the caller; its body follows as it comes.
 * - done: undici ended it (the answer's end, or an error): nothing more comes.
 *
 * queued → sent | expired | done; expired → done; sent → holding | streaming | done;
 * holding → streaming (too large to hold) | sent (too large, but its caller left or Node refused its
 * head: aborted) | done;
 * streaming → done.
 */
export type ForwardPhase = 'queued' | 'expired' | 'sent' | 'holding' | 'streaming' | 'done'

interface Held {
  statusCode: number
  headers: HeldAnswer['headers']
  chunks: Buffer[]
  bytes: number
  limit: number
}

const statusOnly = (statusCode: number): boolean => statusCode === 204 || statusCode === 304

/**
 * Whether the caller's connection can no longer carry an answer. Node's server ends it as soon as
 * the caller closes its side, but closes the response only a turn later: a connection freed in
 * between must not take a request whose caller has gone.
 */
function connectionEnded (res: ServerResponse): boolean {
  // A destroyed socket is not writable either. Only a definite false: a socket that does not
  // say (light-my-request's inject) is not taken for a caller gone.
  return res.req.socket.writable === false
}

/**
 * One request sent through undici's dispatch(), its answer written straight to the caller's
 * response: status, end-to-end headers, and the body chunk by chunk with backpressure both ways.
 */
export class ForwardHandler implements Dispatcher.DispatchHandler {
  #phase: ForwardPhase = 'queued'
  readonly #method: string
  readonly #res: ServerResponse
  readonly #hooks: ForwardHooks
  readonly #context: ForwardContext
  readonly #outlives: boolean
  // A caller already gone: its request is dropped unsent, but for a cache fill's replay
  // (outlivesCaller), which its waiters need and whose budget point is taken.
  readonly #goneAlready: boolean
  /** The caller's connection closed (or was closed already): in any phase. */
  #callerLeft: boolean
  /** `unsent` was called: it is called at most once. */
  #givenBack = false
  /** undici's controller, once the request is on a connection: it may have reached the upstream. */
  #controller: Dispatcher.DispatchController | undefined
  /** When it reached a connection: the final answer's bound counts from here. */
  #startedAt = 0
  #queueTimer: NodeJS.Timeout | undefined
  #finalTimer: NodeJS.Timeout | undefined
  /** The answer read so far, while 'holding'. */
  #held: Held | undefined
  /** Paused until the caller's buffer drains. */
  #awaitingDrain = false
  // Stryker disable next-line BooleanLiteral: equivalent: set at the final answer's head, before onResponseEnd reads it
  #closeDelimited = false
  /** The answer was aborted because its caller left, not because the upstream failed. */
  #droppedForCaller = false

  constructor (method: string, res: ServerResponse, hooks: ForwardHooks, context: ForwardContext) {
    this.#method = method
    this.#res = res
    this.#hooks = hooks
    this.#context = context
    this.#outlives = hooks.outlivesCaller === true
    this.#goneAlready = res.destroyed || connectionEnded(res)
    this.#callerLeft = this.#goneAlready
    context.enterQueue()
    res.once('close', this.#callerGone)
  }

  /** Starts the queue's timer, if the request still waits for a connection. */
  armQueueTimer (): void {
    if (this.#phase === 'queued') this.#queueTimer = setTimeout(this.#expire, this.#context.queueTimeoutMs)
  }

  onRequestStart (c: Dispatcher.DispatchController): void {
    // Again for a caller already gone: it gives nothing back twice, and no controller is set yet.
    if (connectionEnded(this.#res)) this.#callerGone()
    // Dropped before a single byte is written, if its caller has gone or was answered 503.
    if (this.#phase === 'expired' || (this.#callerLeft && !(this.#outlives && this.#goneAlready))) {
      this.#giveBack()
      // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (nothing was sent)
      c.abort(new Error('the request left the queue unsent'))
      return
    }
    const refused = this.#hooks.sending?.()
    if (refused !== undefined) {
      this.#giveBack()
      c.abort(refused)
      return
    }
    this.#controller = c
    this.#moveTo('sent')
    this.#startedAt = performance.now()
  }

  onResponseStart (c: Dispatcher.DispatchController, statusCode: number, headers: HeldAnswer['headers']): void {
    if (statusCode < 100 || statusCode > 999) {
      c.abort(new UpstreamBadResponseError())
      return
    }
    // An interim answer (103 Early Hints) is not the answer: wait for the final one. undici's
    // headersTimeout restarts on each; from the first on, this timer bounds the final answer.
    if (statusCode < 200) {
      this.#finalTimer ??= setTimeout(() => {
        // Stryker disable next-line StringLiteral: wording: the code decides the answer (504), the message is only logged
        c.abort(Object.assign(new Error('no final answer in time'), { code: 'UND_ERR_HEADERS_TIMEOUT' }))
      }, Math.max(0, this.#context.timeoutMs - (performance.now() - this.#startedAt)))
      return
    }
    clearTimeout(this.#finalTimer)
    this.#hooks.answer?.(statusCode, headers)
    this.#closeDelimited = headers['content-length'] === undefined && headers['transfer-encoding'] === undefined &&
      this.#method !== 'HEAD' && !statusOnly(statusCode)
    const hold = this.#hooks.holds(statusCode)
    if (hold !== false) {
      this.#held = { statusCode, headers, chunks: [], bytes: 0, limit: hold === true ? HOLD_BACK_MAX_BYTES : hold }
      this.#moveTo('holding')
      return
    }
    if (this.#callerLeft) {
      this.#dropForGoneCaller(c)
      return
    }
    this.#startStreaming(c, statusCode, headers)
  }

  onResponseData (c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#phase === 'holding') this.#holdOn(c, chunk)
    else this.#write(c, chunk)
  }

  onResponseEnd (): void {
    const reset = this.#context.resets.resetting()
    const was = this.#phase
    this.#finish()
    if (this.#closeDelimited && reset) {
      if (!this.#res.headersSent) {
        // A held-back answer that was cut: nothing went out, the caller still gets a 502.
        // Stryker disable next-line StringLiteral: wording: the code decides the answer (502), the message is only logged
        this.#hooks.failed(Object.assign(new Error('the upstream reset the connection mid-answer'), { code: 'ECONNRESET' }))
        return
      }
      this.#cutCaller()
      return
    }
    if (was === 'holding') {
      const held = this.#held as Held // set on entering 'holding'
      this.#hooks.held({ statusCode: held.statusCode, headers: callerResponseHeaders(held.headers), body: Buffer.concat(held.chunks) })
    } else {
      this.#res.end()
    }
  }

  onResponseError (_c: Dispatcher.DispatchController, err: Error): void {
    const was = this.#phase
    this.#finish()
    this.#giveBack()
    if (was === 'expired') return
    // Others wait for this answer: they are told it failed, whatever became of this caller,
    // once it was sent; dropped because its caller left, it did not fail (`dropped`). Dropped
    // unsent, it was given back (`unsent`): they go on without it.
    if (this.#callerLeft) {
      if (!this.#outlives || this.#controller === undefined) return
      if (this.#droppedForCaller) this.#hooks.dropped?.()
      else this.#hooks.failed(err)
      return
    }
    if (this.#res.headersSent) {
      this.#cutCaller(err)
    } else if (!this.#res.destroyed) {
      this.#hooks.failed(err)
    }
  }

  /** Every change of phase goes through here: leaving 'queued' leaves the pool's queue. */
  #moveTo (next: ForwardPhase): void {
    if (this.#phase === 'queued') {
      this.#context.leaveQueue()
      clearTimeout(this.#queueTimer)
    }
    this.#phase = next
  }

  /** The queue's timer: a request still waiting for a busy pool gets 503 and goes unsent. */
  readonly #expire = (): void => {
    // Stryker disable next-line ConditionalExpression: equivalent: it is armed only while queued (once), and leaving 'queued' clears it
    if (this.#phase !== 'queued') return
    // Still connecting rather than waiting for a busy connection: the connect timeout bounds that.
    if (!this.#context.saturated()) {
      this.#queueTimer = setTimeout(this.#expire, this.#context.queueTimeoutMs)
      return
    }
    this.#moveTo('expired')
    this.#giveBack()
    this.#hooks.failed(new UpstreamBusyError())
  }

  /** The caller's response closed. */
  readonly #callerGone = (): void => {
    this.#callerLeft = true
    // A fill's replay for a caller gone before it began is sent for its waiters (onRequestStart):
    // the close of that response, late as it may be, changes nothing.
    if (this.#outlives && this.#goneAlready) return
    this.#giveBack()
    // Still queued: it is dropped when it reaches a connection (onRequestStart), unsent.
    // Written, and wanted by others: read on, unless it is already streaming to this caller.
    if (!this.#outlives || this.#phase === 'streaming') this.#dropForGoneCaller(this.#controller)
  }

  /** Stops reading an answer nobody will get (its caller left); `dropped` follows for one that outlives it. */
  #dropForGoneCaller (c: Dispatcher.DispatchController | undefined): void {
    this.#droppedForCaller = true
    // Stryker disable next-line StringLiteral: wording: an abort's reason is at most logged (its caller has gone)
    c?.abort(new Error('the caller closed the connection'))
  }

  /** Nothing of the request was or will be written: `unsent`, once. */
  #giveBack (): void {
    if (this.#controller !== undefined || this.#givenBack) return
    this.#givenBack = true
    this.#hooks.unsent?.()
  }

  /** undici ended the exchange: its timers and the caller's listener go. */
  #finish (): void {
    this.#moveTo('done')
    // Stryker disable next-line CallExpression: equivalent: the timer is cleared at the final answer's head; without one, its abort meets a request already over
    clearTimeout(this.#finalTimer)
    this.#res.removeListener('close', this.#callerGone)
  }

  /** Writes the status line and headers ('streaming' from here); false if Node refuses them (not valid HTTP). */
  #startStreaming (c: Dispatcher.DispatchController, statusCode: number, headers: HeldAnswer['headers']): boolean {
    try {
      this.#res.writeHead(statusCode, callerResponseHeaders(headers))
    } catch (err) {
      c.abort(new UpstreamBadResponseError({ cause: err }))
      return false
    }
    this.#moveTo('streaming')
    this.#hooks.started()
    return true
  }

  /** One more chunk of a held answer: past its limit, it is sent as it comes after all (if anyone still waits for it). */
  #holdOn (c: Dispatcher.DispatchController, chunk: Buffer): void {
    const held = this.#held as Held // set on entering 'holding'
    held.chunks.push(chunk)
    held.bytes += chunk.length
    if (held.bytes <= held.limit) return
    this.#held = undefined
    this.#moveTo('sent')
    if (this.#callerLeft) this.#dropForGoneCaller(c)
    else if (this.#startStreaming(c, held.statusCode, held.headers)) for (const part of held.chunks) this.#write(c, part)
  }

  /** A chunk to the caller; a full buffer pauses the upstream until one 'drain' (undici may deliver more meanwhile). */
  #write (c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#res.write(chunk) || this.#awaitingDrain) return
    this.#awaitingDrain = true
    c.pause()
    this.#res.once('drain', () => {
      this.#awaitingDrain = false
      c.resume()
    })
  }

  /**
   * The upstream failed after the status line went out: the caller's connection is cut. The
   * status line may still sit in Node's buffer (it goes out with the first body bytes): it is
   * sent, so the caller sees the answer begun and then cut.
   */
  #cutCaller (err?: Error): void {
    this.#hooks.truncated()
    this.#res.flushHeaders()
    this.#res.destroy(err)
  }
}
