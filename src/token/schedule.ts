// The token lifetime maths, pure and separate from any timer or request.

/** Refresh at most this fraction of the lifetime early, so short tokens still serve most of their life. */
export const REFRESH_MARGIN_FRACTION = 0.1
/** Jitter spreads each refresh over the earlier half of the margin, so pods started together refresh apart. */
export const JITTER_FRACTION = 0.5
/** A token is not sent in its last moments: it must still be valid when the upstream checks it. */
export const EXPIRY_SAFETY_MS = 1_000
export const EXPIRY_SAFETY_FRACTION = 0.02

export interface TokenTimes {
  /** When the gateway considers the token expired, counted from when the request was sent. */
  expiresAt: number
  /** The last instant the token is sent upstream (contract §5.5: check expiry before each use). */
  usableUntil: number
  /** When the background refresh runs. */
  refreshAt: number
}

/**
 * Times for a token whose request was sent at `sentAt` and granted `lifetimeMs`.
 * The lifetime counts from the send time (the gateway started the clock no
 * earlier), so network latency can only make the token look shorter, never longer.
 */
export function tokenTimes (sentAt: number, lifetimeMs: number, refreshMarginMs: number, random: number): TokenTimes {
  const expiresAt = sentAt + lifetimeMs
  const safety = Math.min(EXPIRY_SAFETY_MS, lifetimeMs * EXPIRY_SAFETY_FRACTION)
  const margin = Math.min(refreshMarginMs, lifetimeMs * REFRESH_MARGIN_FRACTION)
  const jitter = random * margin * JITTER_FRACTION
  return {
    expiresAt,
    usableUntil: expiresAt - safety,
    refreshAt: Math.min(expiresAt - margin - jitter, expiresAt - safety)
  }
}

export const BACKOFF_BASE_MS = 500
export const BACKOFF_MAX_MS = 30_000

/**
 * Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff
 * and Jitter"): a random delay up to base·2^(attempt-1), capped.
 */
export function backoffDelay (attempt: number, random: number, baseMs = BACKOFF_BASE_MS, maxMs = BACKOFF_MAX_MS): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1))
  return Math.max(1, Math.round(random * ceiling))
}
