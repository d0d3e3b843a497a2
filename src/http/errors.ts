import type * as Http from 'node:http'
import type { ServerResponse } from 'node:http'
import { createRequire } from 'node:module'
import type { Duplex } from 'node:stream'
import createError from '@fastify/error'
import type { FastifyError, FastifyReply } from 'fastify'
import type { Metrics } from '../metrics.js'

// node:http through require(), not an ESM import: the ESM facade of a builtin reads every
// export, and node:http's lazy WebSocket getters load Node's own copy of undici, which the
// sidecar never calls (src/cli/undici-globals.ts).
const http = createRequire(import.meta.url)('node:http') as typeof Http

// Every answer the sidecar itself produces on the proxy port, each with a stable code:
// the catalogue, the mapping from upstream failures to it, and sendError, which writes
// every one of them. The body is always {"error": code, "message": text}.

export const TokenUnavailableError = createError(
  'TOKEN_UNAVAILABLE', 'no valid access token is available; retry later', 503)

export const UpstreamUnreachableError = createError(
  'UPSTREAM_UNREACHABLE', 'the upstream could not be reached', 502)

export const UpstreamBusyError = createError(
  'UPSTREAM_BUSY', 'every connection to the upstream is busy; retry later', 503)

export const UpstreamTimeoutError = createError(
  'UPSTREAM_TIMEOUT', 'the upstream did not answer in time', 504)

export const UpstreamBadResponseError = createError(
  'UPSTREAM_BAD_RESPONSE', 'the upstream sent an invalid response', 502)

// The egress proxy itself failed (egress-proxy.ts), as distinct from the upstream behind it.
export const EgressProxyUnreachableError = createError(
  'EGRESS_PROXY_UNREACHABLE', 'the egress proxy could not be reached', 502)

export const EgressProxyTimeoutError = createError(
  'EGRESS_PROXY_TIMEOUT', 'the egress proxy did not answer in time', 504)

export const EgressProxyAuthError = createError(
  'EGRESS_PROXY_AUTH_FAILED', 'the egress proxy refused our credentials (%d)', 502)

export const EgressProxyRefusedError = createError(
  'EGRESS_PROXY_REFUSED', 'the egress proxy refused the connection (%d)', 502)

export const BadRequestError = createError(
  'BAD_REQUEST', '%s', 400)

export const HeadersTooLargeError = createError(
  'HEADERS_TOO_LARGE', 'the request head exceeds %d bytes', 431)

export const RequestTimeoutError = createError(
  'REQUEST_TIMEOUT', 'the request was not received in time', 408)

export const HeaderCountError = createError(
  'HEADERS_TOO_LARGE', 'the request has more than %d header fields', 431)

export const StatusForbiddenError = createError(
  'FORBIDDEN', '/status is served to loopback peers only (STATUS_FROM=loopback)', 403)

export const MethodNotAllowedError = createError(
  'METHOD_NOT_ALLOWED', 'the %s method is not forwarded', 405)

export const BodyTooLargeError = createError(
  'BODY_TOO_LARGE', 'the request body exceeds %d bytes', 413)

export const ShuttingDownError = createError(
  'SHUTTING_DOWN', 'the sidecar is shutting down', 503)

/**
 * The overload manager (overload.ts) shed a new request: live memory is near the limit, or
 * MAX_IN_FLIGHT_REQUESTS are in flight. Answered before the body is read, a token asked or a
 * budget spent; nothing went upstream, so a retry (after Retry-After) is always safe.
 */
export const OverloadedError = createError(
  'OVERLOADED', 'the sidecar is overloaded; retry later', 503)

/**
 * A local 429: the request's rule is cooling down after the gateway's rate-limit answer,
 * or its budget is spent. The message names the rule and the reason; the answer carries
 * `Retry-After` (sendError's retryAfterSeconds).
 */
export const UpstreamRateLimitedError = createError(
  'UPSTREAM_RATE_LIMITED', '%s', 429)

export const InternalError = createError(
  'INTERNAL_ERROR', 'the sidecar failed to handle the request', 500)

const OWN_ERRORS = [
  TokenUnavailableError, UpstreamUnreachableError, UpstreamBusyError, UpstreamTimeoutError, UpstreamBadResponseError,
  BadRequestError, HeadersTooLargeError, RequestTimeoutError, MethodNotAllowedError, BodyTooLargeError, ShuttingDownError, OverloadedError,
  UpstreamRateLimitedError, InternalError,
  EgressProxyUnreachableError, EgressProxyTimeoutError, EgressProxyAuthError, EgressProxyRefusedError
]
/** Idempotent routes and the route policy (appended at the end of this file). */
const ORDER_ERRORS = (): unknown[] => [
  IdempotencyKeyMissingError, IdempotencyKeyInvalidError, IdempotencyKeyInUseError, OrderOutcomeUnknownError,
  IdempotencyKeyReusedError, IdempotencyUnavailableError, RouteNotAllowedError
]

/** Whether an error is the egress proxy's own failure (see egress-proxy.ts). */
export function isEgressProxyError (error: unknown): error is Error & { code: string } {
  return error instanceof EgressProxyUnreachableError || error instanceof EgressProxyTimeoutError ||
    error instanceof EgressProxyAuthError || error instanceof EgressProxyRefusedError
}

/** Whether an error is one of the answers above (its message is safe to show the caller). */
export function isOwnError (error: unknown): boolean {
  return OWN_ERRORS.some((E) => error instanceof E) || ORDER_ERRORS().some((E) => error instanceof (E as typeof InternalError))
}

/** The shape every sidecar-made error answer has. */
export interface ErrorBody {
  error: string
  message: string
}

/** Retry-After of a 503 UPSTREAM_BUSY. */
export const BUSY_RETRY_AFTER_S = 1

/** Maps an upstream failure to the sidecar's own error, so no internal address or stack reaches the caller. */
export function upstreamError (error: Error): FastifyError {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof BodyTooLargeError || e instanceof UpstreamBusyError || e instanceof UpstreamBadResponseError) return e
    // The egress proxy's own failures keep their names (EGRESS_PROXY_*): an operator can act on them.
    if (isEgressProxyError(e)) return e as FastifyError
  }
  const code = (error as { code?: string }).code ?? ''
  if (code === 'UND_ERR_HEADERS_TIMEOUT') return new UpstreamTimeoutError({ cause: error })
  if (isBadResponse(error, code)) return new UpstreamBadResponseError({ cause: error })
  return new UpstreamUnreachableError({ cause: error })
}

/** llhttp's parse errors, undici's refusals of a response, and what Node refuses to send on: not valid HTTP. */
function isBadResponse (error: Error, code: string): boolean {
  if (error.name === 'HTTPParserError' || code.startsWith('HPE_') || code === 'UND_ERR_HEADERS_OVERFLOW' || code === 'UND_ERR_INFO') return true
  // Before any of the answer went out: two different Content-Lengths, or a body that does not match one.
  if (code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH') return true
  // undici refuses an unsolicited 101 ('bad upgrade') and a 100 Continue it did not ask for ('bad response').
  if (code === 'UND_ERR_SOCKET' && (error.message === 'bad response' || error.message === 'bad upgrade')) return true
  return code === 'ERR_HTTP_INVALID_STATUS_CODE' || code === 'ERR_INVALID_CHAR' || code === 'ERR_HTTP_INVALID_HEADER_VALUE'
}

/**
 * Where an answer goes: a route's reply; the ServerResponse of an exchange no route
 * answers (Node's parser refused its body); or a bare socket, for what never became a
 * request (CONNECT, a head Node refused). The last two close the connection.
 */
export type ErrorOutlet = FastifyReply | ServerResponse | Duplex

export interface ErrorAnswerOptions {
  /** Sent as Retry-After; a 503 UPSTREAM_BUSY carries BUSY_RETRY_AFTER_S without it. */
  readonly retryAfterSeconds?: number
}

function carriedRetryAfter (error: FastifyError): number | undefined {
  const value: unknown = 'retryAfterSeconds' in error ? error.retryAfterSeconds : undefined
  return typeof value === 'number' ? value : undefined
}

/** Writes one of the answers above, and counts it in store_auth_proxy_errors_total. */
export function sendError (
  to: ErrorOutlet, error: FastifyError, metrics: Pick<Metrics, 'errors'>, options: ErrorAnswerOptions = {}
): void {
  const retryAfter = options.retryAfterSeconds ?? carriedRetryAfter(error) ??
    (error instanceof UpstreamBusyError ? BUSY_RETRY_AFTER_S : undefined)
  const status = error.statusCode ?? 500
  const body: ErrorBody = { error: error.code, message: error.message }
  metrics.errors.inc({ code: error.code })
  if (!(to instanceof http.ServerResponse) && 'raw' in to) {
    if (retryAfter !== undefined) to.header('retry-after', String(retryAfter))
    to.code(status).type('application/json').send(body)
    return
  }
  if (to instanceof http.ServerResponse) {
    const { headers, json } = closingAnswer(body, retryAfter)
    to.writeHead(status, headers)
    to.end(json)
  } else if (to.writable) {
    to.end(rawErrorAnswer(error, retryAfter))
  }
}

function closingAnswer (body: ErrorBody, retryAfter: number | undefined): { headers: Record<string, string | number>, json: string } {
  const json = JSON.stringify(body)
  const headers: Record<string, string | number> = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(json), connection: 'close' }
  if (retryAfter !== undefined) headers['retry-after'] = String(retryAfter)
  return { headers, json }
}

/**
 * sendError's answer on a bare socket, whole (status line, headers, JSON body): the
 * connection gate renders its 503 once with it and writes the same bytes to every excess
 * connection, with no error object made for each.
 */
export function rawErrorAnswer (error: FastifyError, retryAfter?: number): string {
  const status = error.statusCode ?? 500
  const { headers, json } = closingAnswer({ error: error.code, message: error.message }, retryAfter)
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')
  return `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\n${head}\r\n${json}`
}

// Idempotent routes (src/idempotency/, docs/idempotency.md): the answers of
// draft-ietf-httpapi-idempotency-key-header §2.7, each with a code of its own.

/** The route requires a key and the request has none (draft: 400, "Idempotency-Key is missing"). */
export const IdempotencyKeyMissingError = createError(
  'IDEMPOTENCY_KEY_MISSING', 'Idempotency-Key is missing: this route requires one (a quoted string, e.g. a UUID); %s', 400)

/** A malformed key, or two of them. */
export const IdempotencyKeyInvalidError = createError(
  'IDEMPOTENCY_KEY_INVALID', '%s', 400)

/** The draft's 409: a request with this key is in flight; the answer carries Retry-After. */
export const IdempotencyKeyInUseError = createError(
  'IDEMPOTENCY_KEY_IN_USE', 'a request is outstanding for this Idempotency-Key: retry after it is answered', 409)

/**
 * The request with this key was written to TI and no complete answer came (a timeout, a cut
 * connection, a sidecar stopped mid-request): it may have been placed. Never sent again.
 */
export const OrderOutcomeUnknownError = createError(
  'ORDER_OUTCOME_UNKNOWN',
  'the first request with this Idempotency-Key reached TI but its answer did not come back: it may have been placed; look it up (e.g. GET the orders) before placing it again with a new key, or ask the operator to release the key',
  409)

/** The draft's 422: the key was used with another request (method, path or body). */
export const IdempotencyKeyReusedError = createError(
  'IDEMPOTENCY_KEY_REUSED', 'Idempotency-Key is already used with a different request: a key must not be reused across different payloads', 422)

/** The key cannot be checked: refused rather than risk a duplicate (the opposite of the cache). */
export const IdempotencyUnavailableError = createError(
  'IDEMPOTENCY_UNAVAILABLE', 'the Idempotency-Key cannot be checked (%s); nothing was sent; retry later', 503)

/** The route policy (src/policy/) does not allow this method and path with this credential. */
export const RouteNotAllowedError = createError(
  'ROUTE_NOT_ALLOWED', 'the %s method on this path is not allowed by the sidecar\'s route policy', 403)
