// One connection to the fleet's Redis, as every user of it opens it: commands fail at once
// while it is down (nobody waits for Redis), reconnections back off to RECONNECT_MAX_MS and
// pick up a rotated password from RATE_LIMIT_REDIS_URL_FILE, and errors are described without
// the URL's credentials. The quota's scripts and the read cache each open their own, so a
// large cached answer never delays a budget check on the same socket.
import { Redis } from 'ioredis'
import { redisDisplayUrl } from '../config/rate-limits.js'

/** The longest wait between two reconnection attempts: a healed partition is shared again within it. */
export const RECONNECT_MAX_MS = 1_000

/** Reconnects back off from 50 ms, doubling, to RECONNECT_MAX_MS. */
export function reconnectDelayMs (attempt: number): number {
  return Math.min(50 * 2 ** Math.min(attempt, 10), RECONNECT_MAX_MS)
}

export interface RedisConnectionOptions {
  /** The URL, credentials included: never logged or shown (displayUrl is). */
  url: string
  /** A command slower than this fails. */
  timeoutMs: number
  /** The URL as it is now (its file re-read), asked before each reconnection: a rotated password is used from then on. */
  currentUrl?: () => string | undefined
}

export function openRedis ({ url, timeoutMs, currentUrl }: RedisConnectionOptions) {
  const displayUrl = redisDisplayUrl(url)
  /** Every password this connection has used: none is ever shown. */
  const secrets = new Set([url])
  const remember = (text: string): void => {
    secrets.add(text)
    const password = safeDecode(new URL(text).password)
    if (password !== '') secrets.add(password)
  }
  remember(url)
  const client = new Redis(url, {
    lazyConnect: true,
    // A command sent while disconnected fails at once instead of queueing: the sidecar then
    // decides without Redis, and no caller waits for it.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: timeoutMs,
    connectTimeout: Math.max(timeoutMs, 1_000),
    retryStrategy: (attempt) => {
      refreshCredentials()
      return reconnectDelayMs(attempt)
    },
    connectionName: 'store-auth-proxy'
  })
  /** Before a reconnection: the user and password from the URL file as it is now (host and database stay). */
  function refreshCredentials (): void {
    const next = currentUrl?.()
    if (next === undefined) return
    remember(next)
    const parsed = new URL(next)
    client.options.username = safeDecode(parsed.username) || undefined
    client.options.password = safeDecode(parsed.password) || undefined
  }
  let connecting: Promise<boolean> | undefined
  return {
    client,
    displayUrl,
    /** The first connection, bounded by the command timeout (at least 1 s); false if not up by then. Never fails. */
    async connect (): Promise<boolean> {
      connecting ??= client.connect().then(() => true, () => false)
      let timer: NodeJS.Timeout | undefined
      const timeout = new Promise<boolean>((resolve) => { timer = setTimeout(() => { resolve(false) }, Math.max(timeoutMs, 1_000)).unref() })
      const up = await Promise.race([connecting, timeout])
      // Stryker disable next-line CallExpression: the timer is unref'd and only settles a race already settled
      clearTimeout(timer)
      return up
    },
    /** A failure's reason for the log: never the URL's credentials. */
    describe (err: unknown): string {
      let safe = err instanceof Error ? err.message : String(err)
      // Whole URLs first (shown as scheme://host:port), then the passwords alone.
      for (const secret of [...secrets].sort((a, b) => b.length - a.length)) {
        safe = safe.split(secret).join(secret.includes('://') ? displayUrl : '***')
      }
      return safe
    }
  }
}

function safeDecode (text: string): string {
  try {
    return decodeURIComponent(text)
  } catch {
    return text
  }
}
