import type { Logger } from 'pino'
import type { Clock } from '../clock.js'

export interface CallerOptions {
  /** What the example service calls, through the sidecar on localhost, with no credentials. */
  targetUrl: string
  intervalMs: number
  timeoutMs: number
  log: Logger
  clock: Clock
}

/**
 * The example caller service of docker-compose: calls the store API through the
 * sidecar periodically and logs what it got, as an application would.
 */
export function createCaller ({ targetUrl, intervalMs, timeoutMs, log, clock }: CallerOptions) {
  let cancel: (() => void) | undefined
  let stopped = false

  async function callOnce (): Promise<number> {
    try {
      const res = await fetch(targetUrl, { signal: AbortSignal.timeout(timeoutMs) })
      const body = await res.json().catch(() => undefined) as Record<string, unknown> | undefined
      const summary = body === undefined
        ? {}
        : { tiPartNumber: body.tiPartNumber, quantity: body.quantity, error: body.error }
      log.info({ status: res.status, ...summary }, 'store API answered through the sidecar')
      return res.status
    } catch (err) {
      log.warn({ reason: (err as Error).message }, 'store API call failed')
      return 0
    }
  }

  function loop (): void {
    void callOnce().finally(() => {
      if (!stopped) cancel = clock.setTimer(loop, intervalMs)
    })
  }

  return {
    callOnce,
    start: loop,
    stop () { stopped = true; cancel?.() }
  }
}
