import { Counter, Gauge, Histogram, METRIC_PREFIX, type Registry } from './prom.js'

/** The token endpoint: requests by outcome, their duration, and the held token's expiry. */
export function tokenMetrics (registry: Registry) {
  const tokenRequests = new Counter({
    name: `${METRIC_PREFIX}token_requests_total`,
    help: 'Requests to the OAuth token endpoint, by outcome.',
    labelNames: ['outcome'] as const,
    registers: [registry]
  })
  const tokenRequestDuration = new Histogram({
    name: `${METRIC_PREFIX}token_request_duration_seconds`,
    help: 'Duration of requests to the OAuth token endpoint.',
    buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry]
  })
  const tokenExpiry = new Gauge({
    name: `${METRIC_PREFIX}token_expiry_timestamp_seconds`,
    help: 'Unix time at which the current access token expires (0 when none is held).',
    registers: [registry]
  })
  return { tokenRequests, tokenRequestDuration, tokenExpiry }
}
