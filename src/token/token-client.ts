import { Agent, request, type Dispatcher } from 'undici'
import { TOKEN_PATH } from '../config/urls.js'
import { EgressProxyAuthError, isEgressProxyError } from '../http/errors.js'

/** The contract's ceiling on a token's life (§5.5, §8): never trust a longer one. */
export const MAX_TOKEN_LIFETIME_MS = 60 * 60_000
/** A token-endpoint body larger than this is not a token answer. */
export const MAX_RESPONSE_BYTES = 64 * 1024

export interface Credentials {
  clientId: string
  clientSecret: string
}

/**
 * The token answer's non-secret fields (contract §2), shown on /status. A whitelist:
 * nothing else from the answer is ever kept, and never `access_token`.
 */
export interface TokenInfo {
  application_name?: string
  client_id?: string
  scope?: string
  issued_at?: string
  status?: string
}

export const TOKEN_INFO_FIELDS = ['application_name', 'client_id', 'scope', 'issued_at', 'status'] as const
/** A field longer than this is not shown. */
export const TOKEN_INFO_MAX_LENGTH = 256

export interface FetchedToken {
  accessToken: string
  /** Lifetime the endpoint granted, capped at the contract's 60 minutes. */
  lifetimeMs: number
  info: TokenInfo
}

/**
 * Why a token request failed. `outcome` is the metric label; `retryAfterMs` comes
 * from the endpoint's Retry-After; `oauthError` is the OAuth / Apigee error code,
 * the only part of an error body that is ever kept (bodies may echo credentials).
 */
export type TokenOutcome = 'success' | 'network_error' | 'timeout' | 'server_error' | 'rate_limited' |
  'rejected' | 'http_error' | 'invalid_response' | 'credentials_unreadable' | 'proxy_error' | 'proxy_rejected'

export class TokenRequestError extends Error {
  readonly outcome: Exclude<TokenOutcome, 'success'>
  readonly statusCode: number | undefined
  readonly retryAfterMs: number | undefined
  readonly oauthError: string | undefined

  constructor (outcome: Exclude<TokenOutcome, 'success'>, message: string, details: {
    statusCode?: number, retryAfterMs?: number, oauthError?: string, cause?: unknown
  } = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause })
    this.name = 'TokenRequestError'
    this.outcome = outcome
    this.statusCode = details.statusCode
    this.retryAfterMs = details.retryAfterMs
    this.oauthError = details.oauthError
  }
}

export interface TokenClientOptions {
  authUrl: string
  timeoutMs: number
  /** Called before every request, so rotated secret files are picked up (see credentials.ts). */
  credentials: () => Credentials | Promise<Credentials>
  /**
   * The sidecar's own (app.ts): direct or through the egress proxy, as its route says. Without
   * it, an Agent of the client's own: never undici's global dispatcher, which NODE_USE_ENV_PROXY
   * or another module may have replaced (the route shown must be the route taken).
   */
  dispatcher?: Dispatcher
}

/**
 * The form body exactly as the contract shows it (§4.1): three parameters joined
 * with `&`, and rule 2 — no percent-encoding. A secret such as `Zm9v+YmFy/c2VjcmV0=`
 * goes on the wire as is.
 */
export function tokenRequestBody ({ clientId, clientSecret }: Credentials): string {
  return `grant_type=client_credentials&client_id=${clientId}&client_secret=${clientSecret}`
}

/** The token endpoint's URL: AUTH_URL plus the contract's path. Named in logs; it carries no credential (config.ts). */
export function tokenEndpointUrl (authUrl: string): string {
  return authUrl.replace(/\/+$/, '') + TOKEN_PATH
}

/** Makes one token request per call; the caller (token-manager) decides when. */
export function createTokenClient ({ authUrl, timeoutMs, credentials, dispatcher = new Agent() }: TokenClientOptions) {
  const url = tokenEndpointUrl(authUrl)

  return async function fetchToken (): Promise<FetchedToken> {
    const sent = await readCredentials(credentials)
    const body = tokenRequestBody(sent)
    let response: Dispatcher.ResponseData
    const signal = AbortSignal.timeout(timeoutMs)
    try {
      response = await request(url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
        body,
        signal,
        dispatcher
      })
    } catch (err) {
      throw transportError(err, signal, timeoutMs)
    }

    let text: string
    try {
      text = await readLimited(response.body)
    } catch (err) {
      throw transportError(err, signal, timeoutMs)
    }
    const fetched = parseTokenResponse(response.statusCode, response.headers, text)
    // A hostile or broken endpoint could echo the secret into a shown field.
    return { ...fetched, info: withoutSecret(fetched.info, sent.clientSecret) }
  }
}

async function readCredentials (credentials: () => Credentials | Promise<Credentials>): Promise<Credentials> {
  try {
    return await credentials()
  } catch (err) {
    throw new TokenRequestError('credentials_unreadable', `cannot read the client credentials: ${(err as Error).message}`)
  }
}

function transportError (err: unknown, signal: AbortSignal, timeoutMs: number): TokenRequestError {
  if (err instanceof TokenRequestError) return err
  if (signal.aborted) {
    return new TokenRequestError('timeout', `token endpoint did not answer within ${timeoutMs} ms`)
  }
  // The egress proxy's own failure, named for it: not the token endpoint's.
  if (isEgressProxyError(err)) {
    // Stryker disable next-line Regex: every egress error's message begins with "the ", so the first match is the anchored one
    const message = err.message.replace(/^the /, '')
    if (err instanceof EgressProxyAuthError) return new TokenRequestError('proxy_rejected', message, { cause: err })
    const cause = (err.cause as { code?: string } | undefined)?.code
    return new TokenRequestError('proxy_error', cause === undefined ? message : `${message} (${cause})`, { cause: err })
  }
  const code = (err as { code?: string }).code ?? 'unknown'
  return new TokenRequestError('network_error', `token endpoint unreachable (${code})`, { cause: err })
}

async function readLimited (body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    size += (chunk as Buffer).length
    if (size > MAX_RESPONSE_BYTES) {
      // Leaving the loop destroys the body (a stream's async iterator does): the connection
      // is closed, not drained.
      throw new TokenRequestError('invalid_response', `token endpoint answer exceeds ${MAX_RESPONSE_BYTES} bytes`)
    }
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks).toString('utf8')
}

// RFC 6750 §2.1 b64token: what may follow "Bearer " in a header. Checking it also
// guarantees a hostile answer cannot inject CR/LF into the upstream request.
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/
// TI documents `bearer`; stock Apigee answers `BearerToken`.
const BEARER_TYPES = /^bearer(token)?$/i

/**
 * Turns a token-endpoint answer into a token or a TokenRequestError. Pure: no I/O.
 * Handles TI's documented shape (`expires_in` a number) and stock Apigee's (every
 * value a string). A 200 without a usable token is a failure, not a token.
 */
export function parseTokenResponse (
  statusCode: number, headers: Record<string, string | string[] | undefined>, text: string
): FetchedToken {
  if (statusCode !== 200) throw httpError(statusCode, headers, text)

  const body = parseJsonObject(text)
  if (body === undefined) {
    throw new TokenRequestError('invalid_response', 'token endpoint answered 200 without a JSON object', { statusCode })
  }
  const accessToken = body.access_token
  if (typeof accessToken !== 'string' || !B64TOKEN.test(accessToken)) {
    throw new TokenRequestError('invalid_response', 'token endpoint answered 200 without a usable access_token', { statusCode })
  }
  const expiresInS = parseExpiresIn(body.expires_in)
  if (expiresInS === undefined) {
    throw new TokenRequestError('invalid_response', 'token endpoint answered 200 without a usable expires_in', { statusCode })
  }
  const tokenType = body.token_type
  if (tokenType !== undefined && (typeof tokenType !== 'string' || !BEARER_TYPES.test(tokenType))) {
    throw new TokenRequestError('invalid_response', 'token endpoint answered a token_type other than bearer', { statusCode })
  }
  return {
    accessToken,
    lifetimeMs: Math.min(expiresInS * 1000, MAX_TOKEN_LIFETIME_MS),
    info: withoutSecret(tokenInfo(body), accessToken)
  }
}

/**
 * The whitelisted fields that are strings (Apigee sends every value as one; a
 * number is shown as its digits), printable and short. Anything else is left out.
 */
export function tokenInfo (body: Record<string, unknown>): TokenInfo {
  const info: TokenInfo = {}
  for (const field of TOKEN_INFO_FIELDS) {
    const raw = body[field]
    // Number.isFinite is false for anything but a finite number (it does not convert).
    const value = Number.isFinite(raw) ? String(raw) : raw
    if (typeof value === 'string' && value.length <= TOKEN_INFO_MAX_LENGTH && /^[\x20-\x7e]*$/.test(value)) {
      info[field] = value
    }
  }
  return info
}

/** Drops every field that contains `secret` (the token or the client secret): shown fields must never carry one. */
function withoutSecret (info: TokenInfo, secret: string): TokenInfo {
  if (secret === '') return info
  const kept: TokenInfo = {}
  for (const field of TOKEN_INFO_FIELDS) {
    const value = info[field]
    if (value !== undefined && !value.includes(secret)) kept[field] = value
  }
  return kept
}

/** `expires_in`: a positive integer, as a number (TI) or a string of digits (Apigee). */
export function parseExpiresIn (value: unknown): number | undefined {
  if (typeof value === 'number') {
    return Number.isSafeInteger(value) && value > 0 ? value : undefined
  }
  if (typeof value === 'string' && /^\d{1,10}$/.test(value)) {
    const n = Number(value)
    return n > 0 ? n : undefined
  }
  return undefined
}

function parseJsonObject (text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text)
    return typeof value === 'object' && value !== null && !Array.isArray(value)
      ? value as Record<string, unknown>
      : undefined
  } /* Stryker disable next-line BlockStatement: emptied, the catch returns undefined all the same */ catch {
    return undefined
  }
}

function httpError (
  statusCode: number, headers: Record<string, string | string[] | undefined>, text: string
): TokenRequestError {
  const oauthError = oauthErrorCode(text)
  const retryAfterMs = parseRetryAfter(headers['retry-after'])
  const details = { statusCode, oauthError, retryAfterMs }
  const suffix = oauthError === undefined ? '' : ` (${oauthError})`
  if (statusCode === 429) {
    return new TokenRequestError('rate_limited', `token endpoint rate-limited the request (429)${suffix}`, details)
  }
  if (statusCode >= 500) {
    return new TokenRequestError('server_error', `token endpoint failed (${statusCode})${suffix}`, details)
  }
  if ((statusCode === 400 || statusCode === 401) && oauthError !== undefined) {
    return new TokenRequestError('rejected', `token endpoint rejected the client credentials (${statusCode})${suffix}`, details)
  }
  return new TokenRequestError('http_error', `token endpoint answered ${statusCode}${suffix}`, details)
}

// Only a short identifier-like code is kept from an error body: RFC 6749 §5.2
// `error`, or Apigee's `ErrorCode` / `fault.detail.errorcode`.
const ERROR_CODE = /^[A-Za-z0-9_.-]{1,64}$/

export function oauthErrorCode (text: string): string | undefined {
  const body = parseJsonObject(text)
  if (body === undefined) return undefined
  const fault = body.fault as { detail?: { errorcode?: unknown } } | undefined
  const candidates = [body.error, body.ErrorCode, fault?.detail?.errorcode]
  return candidates.find((c): c is string => typeof c === 'string' && ERROR_CODE.test(c))
}

// An HTTP-date (RFC 9110 §5.6.7) begins with the day's name, in each of its three forms
// (IMF-fixdate, RFC 850, asctime). Date.parse alone reads much else as a date:
// `120abc` as a day long past, which would mean "retry now".
const HTTP_DATE_START = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,? /

/** Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Anything else is ignored. */
export function parseRetryAfter (value: string | string[] | undefined, now = Date.now()): number | undefined {
  const v = Array.isArray(value) ? value[0] : value
  if (v === undefined) return undefined
  const trimmed = v.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000
  if (!HTTP_DATE_START.test(trimmed)) return undefined
  // Every HTTP-date is GMT, but the asctime form does not say so, and Date.parse would read it
  // as local time. A second GMT after the first changes nothing.
  const date = Date.parse(`${trimmed} GMT`)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}
