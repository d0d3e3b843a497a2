import createError from '@fastify/error'

// Every answer the sidecar itself produces on the proxy port, each with a stable
// code. The body is always {"error": code, "message": text}; see proxy.ts.

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

export const MethodNotAllowedError = createError(
  'METHOD_NOT_ALLOWED', 'the %s method is not forwarded', 405)

export const BodyTooLargeError = createError(
  'BODY_TOO_LARGE', 'the request body exceeds %d bytes', 413)

export const ShuttingDownError = createError(
  'SHUTTING_DOWN', 'the sidecar is shutting down', 503)

/**
 * A local 429: the request's rule is cooling down after the gateway's rate-limit answer,
 * or its budget is spent. The message names the rule and the reason; the answer carries
 * `Retry-After` (retryAfterSeconds, see proxy.ts sendError).
 */
export const UpstreamRateLimitedError = createError(
  'UPSTREAM_RATE_LIMITED', '%s', 429)

export const InternalError = createError(
  'INTERNAL_ERROR', 'the sidecar failed to handle the request', 500)

const OWN_ERRORS = [
  TokenUnavailableError, UpstreamUnreachableError, UpstreamBusyError, UpstreamTimeoutError, UpstreamBadResponseError,
  BadRequestError, HeadersTooLargeError, RequestTimeoutError, MethodNotAllowedError, BodyTooLargeError, ShuttingDownError,
  UpstreamRateLimitedError, InternalError,
  EgressProxyUnreachableError, EgressProxyTimeoutError, EgressProxyAuthError, EgressProxyRefusedError
]

/** Whether an error is the egress proxy's own failure (see egress-proxy.ts). */
export function isEgressProxyError (error: unknown): error is Error & { code: string } {
  return error instanceof EgressProxyUnreachableError || error instanceof EgressProxyTimeoutError ||
    error instanceof EgressProxyAuthError || error instanceof EgressProxyRefusedError
}

/** Whether an error is one of the answers above (its message is safe to show the caller). */
export function isOwnError (error: unknown): boolean {
  return OWN_ERRORS.some((E) => error instanceof E)
}

/** The shape every sidecar-made error answer has. */
export interface ErrorBody {
  error: string
  message: string
}
