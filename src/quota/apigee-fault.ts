// Apigee's rate-limit fault: older gateways answer a SpikeArrest or Quota violation with 500
// and an error code instead of 429. Recognised in JSON and XML (Apigee answers a caller that
// asks for XML in XML), compressed or not. Pure.
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib'

/** Apigee's error codes for SpikeArrest and Quota violations start with this. */
export const RATE_LIMIT_ERRORCODE_PREFIX = 'policies.ratelimit.'

/** A decoded fault is a few hundred bytes: more than this is not one. */
const MAX_DECODED_BYTES = 1024 * 1024

/** The body as sent, decoded from its Content-Encoding (gzip, deflate, br); undefined if it cannot be. */
function decoded (body: Buffer, contentEncoding: string | string[] | undefined): Buffer | undefined {
  // Stryker disable next-line StringLiteral: several codings, joined either way, are none the sidecar decodes
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

/** `{"fault":{"detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}}` */
function jsonErrorcode (text: string): unknown {
  try {
    const parsed = JSON.parse(text) as { fault?: { detail?: { errorcode?: unknown } } } | null
    return parsed?.fault?.detail?.errorcode
  } catch {
    return undefined
  }
}

// `<fault><faultstring>…</faultstring><detail><errorcode>policies.ratelimit.X</errorcode></detail></fault>`,
// optionally after an XML declaration: the fault element is the document's root and the
// error code sits in its detail. (A regular expression over this fixed, tiny shape; no entity
// or namespace handling is needed for Apigee's own fault.)
const XML_FAULT = /^(?:<\?xml[^>]*\?>\s*)?<fault>[\s\S]*<detail>[\s\S]*?<errorcode>\s*([^<\s]+)\s*<\/errorcode>[\s\S]*<\/detail>[\s\S]*<\/fault>\s*$/

/**
 * Whether a 500's body is Apigee's rate-limit fault, also when the gateway compressed it
 * (the caller still gets the bytes as they came).
 */
export function isRateLimitFault (body: Buffer, contentEncoding?: string | string[]): boolean {
  // Stryker disable next-line ConditionalExpression: an empty body holds no error code either; this only skips the work
  if (body.length === 0) return false
  const bytes = decoded(body, contentEncoding)
  if (bytes === undefined || !bytes.includes(RATE_LIMIT_ERRORCODE_PREFIX)) return false
  const text = bytes.toString('utf8').trim()
  const code = text.startsWith('<') ? XML_FAULT.exec(text)?.[1] : jsonErrorcode(text)
  return typeof code === 'string' && code.startsWith(RATE_LIMIT_ERRORCODE_PREFIX)
}
