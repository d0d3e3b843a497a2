// The idempotency key of a request and its fingerprint (draft-ietf-httpapi-idempotency-key-header):
// pure functions, no I/O.
import { createHash } from 'node:crypto'

/** The longest key accepted (the draft leaves it to the server; UUIDs are 36). */
export const MAX_KEY_LENGTH = 255

/** A key, or why there is none: `missing` (none given) or a problem the caller can act on. */
export type KeyFound = { readonly key: string } | { readonly missing: true } | { readonly problem: string }

/**
 * The key from `Idempotency-Key`, an Item Structured Header whose value MUST be a String
 * (draft §2.1, RFC 8941 §3.3.3: `"` ... `"`, `\"` and `\\` escaped, printable ASCII). A bare
 * token (`Idempotency-Key: 8e03978e-...`, as many clients send it) is read as the same key.
 * More than one field is refused (draft §2.1: clients MUST NOT send more than one).
 */
export function headerKey (rawHeaders: readonly string[]): KeyFound {
  const values: string[] = []
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if ((rawHeaders[i] ?? '').toLowerCase() === 'idempotency-key') values.push((rawHeaders[i + 1] ?? '').trim())
  }
  if (values.length === 0) return { missing: true }
  if (values.length > 1) return { problem: 'the request carries more than one Idempotency-Key header' }
  const value = values[0] ?? ''
  const key = value.startsWith('"') ? sfString(value) : /^[A-Za-z0-9._~:+/=-]+$/.test(value) ? value : undefined
  if (key === undefined) return { problem: 'Idempotency-Key must be a structured-field string, e.g. "8e03978e-40d5-43e8-bc93-6894a57f9324"' }
  return checked(key)
}

/** An RFC 8941 sf-string's value, or undefined when the text is not exactly one. */
function sfString (text: string): string | undefined {
  let out = ''
  for (let i = 1; i < text.length; i++) {
    const c = text[i] ?? ''
    if (c === '"') return i === text.length - 1 ? out : undefined
    if (c === '\\') {
      const next = text[i + 1]
      if (next !== '"' && next !== '\\') return undefined
      out += next
      i += 1
      continue
    }
    const code = c.charCodeAt(0)
    if (code < 0x20 || code > 0x7e) return undefined
    out += c
  }
  return undefined
}

function checked (key: string): KeyFound {
  if (key === '') return { problem: 'Idempotency-Key must not be empty' }
  if (key.length > MAX_KEY_LENGTH) return { problem: `Idempotency-Key must be at most ${MAX_KEY_LENGTH} characters` }
  return { key }
}

/**
 * The key from a field of a JSON body (`key=body:poNumber`, a dotted path): a string or a
 * number there. Anything else (no JSON, no such field, an object) is no key.
 */
export function bodyKey (body: Buffer | null, field: string): KeyFound {
  if (body === null || body.length === 0) return { missing: true }
  let value: unknown
  try {
    value = JSON.parse(body.toString('utf8'))
  } catch {
    return { missing: true }
  }
  for (const name of field.split('.')) {
    value = typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>)[name] : undefined
  }
  if (typeof value === 'number' && Number.isFinite(value)) return checked(String(value))
  if (typeof value === 'string') return checked(value)
  return { missing: true }
}

/**
 * Where a key is kept: a digest of the rule and the key, so the stores (and Redis, and the
 * state directory) never hold a caller's key, and one key on two routes is two keys.
 */
export function keyId (ruleId: string, key: string): string {
  return createHash('sha256').update(`${ruleId}\n${key}`).digest('base64url')
}

/**
 * The fingerprint of a request (draft §2.4: a checksum of the entire payload), with its method
 * and target: the same key with another body, or on another order's path, is another request.
 */
export function fingerprint (method: string, target: string, body: Buffer | null): string {
  const hash = createHash('sha256').update(`${method} ${target}\n`)
  if (body !== null) hash.update(body)
  return hash.digest('base64url')
}
