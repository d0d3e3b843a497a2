import { FORWARDED_METHODS } from '../http/rules.js'
import { Counter, Gauge, Histogram, METRIC_PREFIX, type Registry } from './prom.js'

const KNOWN_METHODS = new Set<string>(FORWARDED_METHODS)

/** Label values come from a fixed set so a client cannot blow up the series count. */
export function methodLabel (method: string): string {
  return KNOWN_METHODS.has(method) ? method : 'OTHER'
}

const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx']

/** The class of the status line sent, or `none` when the caller got no status line. */
export function statusClass (statusCode: number | undefined): string {
  if (statusCode === undefined) return 'none'
  return STATUS_CLASSES[Math.floor(statusCode / 100) - 1] ?? 'other'
}

/**
 * How an exchange with a caller ended: the answer went out whole, the caller went
 * away first, or the upstream failed mid-answer and the caller's connection was cut.
 */
export type Outcome = 'completed' | 'aborted' | 'truncated'

/** Exchanges on the proxy port: by method, status class and outcome; errors; the upstream queue. */
export function exchangeMetrics (registry: Registry) {
  const requests = new Counter({
    name: `${METRIC_PREFIX}requests_total`,
    help: 'Proxied requests, by method, class of the status line sent (none if none was) and outcome (completed, aborted, truncated).',
    labelNames: ['method', 'status_class', 'outcome'] as const,
    registers: [registry]
  })
  const requestDuration = new Histogram({
    name: `${METRIC_PREFIX}request_duration_seconds`,
    help: 'Duration of proxied requests, from arrival to the end of the answer, by class of the status line sent (none if none was).',
    labelNames: ['status_class'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry]
  })
  const requestsInFlight = new Gauge({
    name: `${METRIC_PREFIX}requests_in_flight`,
    help: 'Proxied requests currently being handled.',
    registers: [registry]
  })

  const errors = new Counter({
    name: `${METRIC_PREFIX}errors_total`,
    help: 'Answers the sidecar made itself on the proxy port, by error code.',
    labelNames: ['code'] as const,
    registers: [registry]
  })
  const upstreamQueued = new Gauge({
    name: `${METRIC_PREFIX}upstream_queued_requests`,
    help: 'Requests waiting for a connection to the upstream.',
    registers: [registry]
  })

  // The per-request path: label children looked up once per label set, not hashed per call.
  const requestChildren = new Map<string, { inc: () => void }>()
  const durationChildren = new Map<string, { observe: (seconds: number) => void }>()
  /** Counts one finished exchange on the proxy port (labels: see requests and requestDuration). */
  function recordExchange (method: string, statusClassLabel: string, outcome: Outcome, seconds: number): void {
    const key = `${method} ${statusClassLabel} ${outcome}`
    let count = requestChildren.get(key)
    if (count === undefined) {
      count = requests.labels(method, statusClassLabel, outcome)
      requestChildren.set(key, count)
    }
    count.inc()
    let duration = durationChildren.get(statusClassLabel)
    if (duration === undefined) {
      duration = requestDuration.labels(statusClassLabel)
      durationChildren.set(statusClassLabel, duration)
    }
    duration.observe(seconds)
  }

  return { requests, requestDuration, requestsInFlight, errors, upstreamQueued, recordExchange }
}
