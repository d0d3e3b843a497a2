// Everything that relies on undici's or Node's internals, in one place.
//
// What it relies on:
// - undici's client-h1 `onHttpSocketError` takes an ECONNRESET on a connection that will
//   not be kept alive as the end of the message (a macOS quirk), and the 'error' listener
//   added in the Pool's `connect` runs before undici's own on the same socket
//   (createResetWatch).
// - Node's net.Socket writes through the overridable `_write` / `_writev` methods, and
//   fails the whole socket, reading included, when one of them reports an error
//   (keepReadingAfterWriteError).
// - Node's http server sets the undocumented `socket._httpMessage` to the ServerResponse
//   of the exchange under way on a connection (pendingResponse).
// - Node's http server feeds a caller's socket to its parser from C++, so pause() does not
//   stop it; the socket's `_handle.readStop()` (what net.Socket's own pause calls) does
//   (stopReading), and `_handle.readStart()` reads again, only while the handle's `reading`
//   flag says Node itself has not paused it (resumeReading).
// - Node's http server gives each connection a parser (`socket.parser`) that calls the
//   function in its slot 0 (HTTPParser.kOnMessageBegin, unset by Node's server) at a
//   message's first byte, and the one in its slot 2 (kOnHeadersComplete, the same function
//   for every parser of the pool) once that message's head is whole (followHeads). Checked
//   on each parser before use (headSlotsMismatch): the slot numbers on HTTPParser, slot 2's
//   function name, slot 0 empty; otherwise heads are not followed (waiting-connections.ts).
// - Node's http server gives a closed connection's parser back to a pool (`parsers` of the
//   legacy module `_http_common`, its free parsers in the array `list`), and `close()`s a
//   parser itself when the pool is full (unpoolParser).
//
// Checked with undici 7.30.2 (package.json pins ~7.30.2) on Node.js 24.22.3; each
// upgrade of either must run these tests, which fail if an assumption breaks:
// - test/upstream/socket-internals.test.ts (each function, driven step by step);
// - test/faults/early-answer.test.ts (an upstream's early 413 before the upload ends);
// - test/faults/upstream-protocol.test.ts (a reset mid-body of a close-delimited answer,
//   held back or not);
// - test/proxy/refusals.test.ts (a body Node's parser refuses after the head was parsed);
// - test/overload/waiting-connections.test.ts (a request sent after stopReading; heads
//   begun behind a request, behind a body, pipelined, told apart from bodies);
// - test/overload/held-heads.test.ts (reads stopped behind an exchange, resumed after it);
// - test/upstream/head-slots.test.ts (this Node's parser passes headSlotsMismatch; one that
//   does not is left untouched).
// - test/overload/parser-pool.test.ts (a closed connection's parser, and the head it held,
//   leave the pool).
import type { ServerResponse } from 'node:http'
import { createRequire } from 'node:module'
import type { Socket } from 'node:net'

/** Whether undici is, at this moment, ending a message because of an ECONNRESET. */
export interface ResetWatch {
  /** Adds the listener to a new upstream socket, before undici adds its own. */
  watch: (socket: Socket) => void
  /** True only while undici handles a reset as the end of a message (see onResponseEnd in forward-handler.ts). */
  resetting: () => boolean
}

/**
 * undici takes an ECONNRESET on a connection that will not be kept alive as the end of
 * the message (client-h1 onHttpSocketError). For an answer whose end is the connection's
 * close, that would pass a reset mid-body off as a complete answer (RFC 9112 §8: an
 * incomplete message must be seen as incomplete). The listener runs just before
 * undici's on the same socket, so `resetting` is true exactly while undici ends the
 * message on a reset. One flag serves the whole pool: undici handles one socket's error
 * synchronously, and the flag is cleared on the next tick.
 */
export function createResetWatch (): ResetWatch {
  let resetting = false
  const endResetting = (): void => { resetting = false }
  const onSocketError = (err: NodeJS.ErrnoException): void => {
    if (err.code !== 'ECONNRESET') return
    resetting = true
    process.nextTick(endResetting)
  }
  return {
    watch: (socket) => { socket.on('error', onSocketError) },
    resetting: () => resetting
  }
}

type WriteCallback = (err?: Error | null) => void
/** The two methods of Node's net.Socket through which every write goes. */
export interface SocketWrites {
  _write: (chunk: unknown, encoding: BufferEncoding, cb: WriteCallback) => void
  _writev: (chunks: unknown, cb: WriteCallback) => void
}

/**
 * An upstream that answers before reading the whole body (its own 413 for a large
 * upload) and then closes makes the next body write fail (EPIPE, ECONNRESET) while
 * its answer may still sit unread in the socket. Node fails the whole socket on a
 * write error and stops reading, so the caller would get 502 or the answer depending
 * on timing. Here such a write error only ends the writing: the rest of the body is
 * dropped, reading goes on, and undici either reads the answer or sees the read fail
 * (then 502 as before).
 */
export function keepReadingAfterWriteError (socket: Socket | SocketWrites): void {
  const internals = socket as unknown as SocketWrites
  const write = internals._write
  const writev = internals._writev
  let writeFailed = false
  const guard = (cb: WriteCallback): WriteCallback => (err) => {
    const code = (err as NodeJS.ErrnoException | null | undefined)?.code
    if (code === 'EPIPE' || code === 'ECONNRESET') {
      writeFailed = true
      cb()
      return
    }
    cb(err)
  }
  internals._write = function (chunk, encoding, cb) {
    if (writeFailed) cb()
    else write.call(this, chunk, encoding, guard(cb))
  }
  internals._writev = function (chunks, cb) {
    if (writeFailed) cb()
    else writev.call(this, chunks, guard(cb))
  }
}

/** Both workarounds, for each new socket of the upstream pool. */
export function guardUpstreamSocket (socket: Socket, resets: ResetWatch): void {
  resets.watch(socket)
  keepReadingAfterWriteError(socket)
}

/**
 * The ServerResponse of the exchange under way on a caller's connection, if any: Node's
 * clientError handler gets only the socket, and an exchange whose head was parsed (its
 * body then failed to parse) must answer, and count itself, through its own response.
 */
export function pendingResponse (socket: unknown): ServerResponse | null {
  return (socket as { _httpMessage?: ServerResponse | null })._httpMessage ?? null
}

interface ReadingHandle { reading?: boolean, readStop?: () => number, readStart?: () => number }
const handleOf = (socket: Socket): ReadingHandle | null | undefined => (socket as unknown as { _handle?: ReadingHandle | null })._handle

/** Stops reading a caller's socket, its HTTP parser's reads included: nothing more it sends is parsed. */
export function stopReading (socket: Socket): void {
  handleOf(socket)?.readStop?.()
}

/**
 * Reads a socket stopReading stopped again, unless Node paused it meanwhile (its writes backed
 * up: `reading` false), whose own resume then reads again.
 */
export function resumeReading (socket: Socket): void {
  const handle = handleOf(socket)
  if (!socket.destroyed && handle?.reading === true) handle.readStart?.()
}

/** Node's HTTPParser.kOnMessageBegin and kOnHeadersComplete: the parser's slots for what it calls at a message's first byte, and once its head is whole. */
const ON_MESSAGE_BEGIN = 0
const ON_HEADERS_COMPLETE = 2
/** The function Node's server puts in slot 2 (lib/_http_common.js), and none in slot 0. */
const HEADERS_COMPLETE_NAME = 'parserOnHeadersComplete'
const wrapped = Symbol('head followed')

interface Parser { socket?: unknown, constructor?: unknown, [ON_MESSAGE_BEGIN]?: unknown, [ON_HEADERS_COMPLETE]?: unknown, [wrapped]?: true }
const parserOf = (socket: Socket): Parser | null | undefined => (socket as unknown as { parser?: Parser | null }).parser

/** What follows each socket's heads. Node pools parsers (the client's too): the functions look their socket up here. */
interface HeadWatch { begun: () => void, whole: () => void }
const watches = new WeakMap<object, HeadWatch>()
const watchOf = (parser: Parser): HeadWatch | undefined =>
  typeof parser.socket === 'object' && parser.socket !== null ? watches.get(parser.socket) : undefined
function messageBegun (this: Parser): void { watchOf(this)?.begun() }

/**
 * Why `parser` is not the one followHeads was written for, or undefined when it is: its class
 * numbers the two slots as Node 24's HTTPParser does, slot 2 holds Node's own
 * parserOnHeadersComplete (or followHeads' wrapper of it), and slot 0 nothing of Node's.
 */
export function headSlotsMismatch (parser: Parser | null | undefined): string | undefined {
  if (parser === null || parser === undefined) return 'the socket has no HTTP parser'
  const slots = parser.constructor as { kOnMessageBegin?: unknown, kOnHeadersComplete?: unknown } | undefined
  if (slots?.kOnMessageBegin !== ON_MESSAGE_BEGIN || slots.kOnHeadersComplete !== ON_HEADERS_COMPLETE) {
    return `HTTPParser.kOnMessageBegin ${String(slots?.kOnMessageBegin)} and kOnHeadersComplete ${String(slots?.kOnHeadersComplete)}, not ${ON_MESSAGE_BEGIN} and ${ON_HEADERS_COMPLETE}`
  }
  const headersComplete = parser[ON_HEADERS_COMPLETE]
  if (parser[wrapped] !== true && (typeof headersComplete !== 'function' || headersComplete.name !== HEADERS_COMPLETE_NAME)) {
    return `the parser's slot ${ON_HEADERS_COMPLETE} holds ${typeof headersComplete === 'function' ? `function ${headersComplete.name}` : typeof headersComplete}, not ${HEADERS_COMPLETE_NAME}`
  }
  const messageBegin = parser[ON_MESSAGE_BEGIN]
  if (messageBegin !== null && messageBegin !== undefined && messageBegin !== messageBegun) {
    return `the parser's slot ${ON_MESSAGE_BEGIN} already holds ${typeof messageBegin === 'function' ? `function ${messageBegin.name}` : typeof messageBegin}`
  }
  return undefined
}

/**
 * Calls `watch.begun` as a request head begins on `socket` (an http.Server's, after Node's
 * own 'connection' listener), at a message's first byte however it arrived (alone, after a
 * body, pipelined behind another request), and `watch.whole` once that head is complete.
 * When the parser is not what this relies on (headSlotsMismatch), nothing of it is touched and
 * nothing is called: returns why. Undefined once following.
 */
export function followHeads (socket: Socket, watch: HeadWatch): string | undefined {
  const parser = parserOf(socket)
  const mismatch = headSlotsMismatch(parser)
  if (mismatch !== undefined || parser === null || parser === undefined) return mismatch
  const headersComplete = parser[ON_HEADERS_COMPLETE] as (...a: unknown[]) => unknown
  parser[ON_MESSAGE_BEGIN] = messageBegun
  if (parser[wrapped] !== true) {
    // Once per parser: it keeps this function as it goes back to the pool and out again.
    parser[wrapped] = true
    parser[ON_HEADERS_COMPLETE] = function (this: Parser, ...args: unknown[]): unknown {
      watchOf(this)?.whole()
      return headersComplete.apply(this, args)
    }
  }
  watches.set(socket, watch)
  return undefined
}

/** Stops calling `socket`'s watch (its parser is left as it is: the functions find no watch). */
export function unfollowHeads (socket: Socket): void {
  watches.delete(socket)
}

/** A socket's HTTP parser (Node's server sets it at the connection), to hand to unpoolParser once the socket closed. */
export const httpParserOf = (socket: Socket): object | null | undefined => parserOf(socket)

interface ParserPool { list: unknown[] }
let parserPool: ParserPool | null | undefined
function pooledParsers (): unknown[] | undefined {
  if (parserPool === undefined) {
    try {
      const { parsers } = createRequire(import.meta.url)('_http_common') as { parsers?: { list?: unknown } }
      parserPool = Array.isArray(parsers?.list) ? parsers as ParserPool : null
    } catch {
      parserPool = null
    }
  }
  return parserPool?.list
}

/**
 * Takes a closed connection's parser out of Node's pool, when Node put it there, and closes it
 * (as Node does when the pool is full), on the next turn like Node. A pooled parser keeps the
 * copies of the header values it held across reads until a later head of as many fields
 * begins: up to MAX_HEADER_BYTES each, for up to 1000 parsers. Returns whether it was pooled.
 * (An async_hooks destroy hook, none here, then sees a second destroy, of id -1: free() sent the first.)
 */
export function unpoolParser (parser: object | null | undefined): boolean {
  const list = pooledParsers()
  const at = parser === null || parser === undefined || list === undefined ? -1 : list.lastIndexOf(parser)
  if (at === -1) return false
  list?.splice(at, 1)
  setImmediate(() => { (parser as { close?: () => void }).close?.() })
  return true
}
