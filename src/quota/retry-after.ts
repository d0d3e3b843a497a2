// The gateway's Retry-After, and the one a local 429 sends. Pure.

/**
 * Milliseconds a `Retry-After` value asks to wait (RFC 9110 §10.2.3: delta-seconds or an
 * HTTP-date), or undefined when there is none or it is unusable (malformed, or not in the
 * future: the gateway still said "rate limited", so the backoff applies). An HTTP-date is
 * measured against the answer's own `Date` when it has a valid one (the gateway's clock,
 * RFC 9110 §10.2.3), else against the local wall clock: a skewed local clock must not turn
 * the gateway's 20 s into an hour.
 */
export function retryAfterMs (value: string | string[] | undefined, wallNowMs: number, date?: string | string[]): number | undefined {
  const text = (Array.isArray(value) ? value[0] : value)?.trim()
  // Stryker disable next-line ConditionalExpression,StringLiteral: an empty value is no number and no HTTP-date either
  if (text === undefined || text === '') return undefined
  if (/^\d+$/.test(text)) {
    const seconds = Number(text)
    return seconds > 0 && Number.isFinite(seconds) ? seconds * 1000 : undefined
  }
  const at = httpDate(text)
  if (at === undefined) return undefined
  // Stryker disable next-line StringLiteral: no Date is as unusable as any other text that is no HTTP-date
  const sent = httpDate((Array.isArray(date) ? date[0] : date)?.trim() ?? '')
  const ms = at - (sent ?? wallNowMs)
  return ms > 0 ? ms : undefined
}

/** An HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms Date.parse reads), in unix ms. */
function httpDate (text: string): number | undefined {
  if (!/^[A-Za-z]{3}/.test(text)) return undefined
  const at = Date.parse(text)
  return Number.isNaN(at) ? undefined : at
}

/** The `Retry-After` seconds of a local 429: exact, rounded up, at least 1. */
export function retryAfterSeconds (ms: number): number {
  return Math.max(1, Math.ceil(ms / 1000))
}
