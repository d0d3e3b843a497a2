// What a gateway's rate-limit answer says, and the Retry-After the sidecar sends. Pure.
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib'

/** Apigee's error codes for SpikeArrest and Quota violations start with this. */
export const RATE_LIMIT_ERRORCODE_PREFIX = 'policies.ratelimit.'

/**
 * Milliseconds a `Retry-After` value asks to wait (RFC 9110 §10.2.3: delta-seconds or
 * an HTTP-date), or undefined when there is none or it is unusable (malformed, or not
 * in the future: the gateway still said "rate limited", so the backoff applies).
 */
export function retryAfterMs (value: string | string[] | undefined, wallNowMs: number): number | undefined {
  const text = (Array.isArray(value) ? value[0] : value)?.trim()
  if (text === undefined || text === '') return undefined
  if (/^\d+$/.test(text)) {
    const seconds = Number(text)
    return seconds > 0 && Number.isFinite(seconds) ? seconds * 1000 : undefined
  }
  // An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms Date.parse reads).
  if (!/^[A-Za-z]{3}/.test(text)) return undefined
  const at = Date.parse(text)
  if (Number.isNaN(at)) return undefined
  const ms = at - wallNowMs
  return ms > 0 ? ms : undefined
}

/** The `Retry-After` seconds of a local 429: exact, rounded up, at least 1. */
export function retryAfterSeconds (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}

/** A decoded fault is JSON of a few hundred bytes: more than this is not one. */
const MAX_DECODED_BYTES = 1024 * 1024

/** The body as sent, decoded from its Content-Encoding (gzip, deflate, br); undefined if it cannot be. */
function decoded (body: Buffer, contentEncoding: string | string[] | undefined): Buffer | undefined {
  const coding = (Array.isArray(contentEncoding) ? contentEncoding.join(',') : contentEncoding ?? '').trim().toLowerCase()
  const options = { maxOutputLength: MAX_DECODED_BYTES }
  try {
    if (coding === '' || coding === 'identity') return body
    if (coding === 'gzip' || coding === 'x-gzip') return gunzipSync(body, options)
    if (coding === 'deflate') return inflateSync(body, options)
    if (coding === 'br') return brotliDecompressSync(body, options)
  } catch {}
  return undefined
}

/**
 * Whether a 500's body is Apigee's rate-limit fault (older gateways answer a
 * SpikeArrest or Quota violation with 500):
 * `{"fault":{"detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}}`, also when the
 * gateway compressed it (the caller still gets the bytes as they came).
 */
export function isRateLimitFault (body: Buffer, contentEncoding?: string | string[]): boolean {
  if (body.length === 0) return false
  const text = decoded(body, contentEncoding)
  if (text === undefined || !text.includes(RATE_LIMIT_ERRORCODE_PREFIX)) return false
  let parsed: unknown
  try {
    parsed = JSON.parse(text.toString('utf8'))
  } catch {
    return false
  }
  const code = (parsed as { fault?: { detail?: { errorcode?: unknown } } } | null)?.fault?.detail?.errorcode
  return typeof code === 'string' && code.startsWith(RATE_LIMIT_ERRORCODE_PREFIX)
}
