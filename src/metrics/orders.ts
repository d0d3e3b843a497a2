import { Counter, Gauge, METRIC_PREFIX, type Registry } from './prom.js'

/** Idempotent routes (src/idempotency/) and the route policy (src/policy/). */
export function orderMetrics (registry: Registry) {
  let heldUnknown = (): number => 0
  return {
    idempotencyRequests: new Counter({
      name: `${METRIC_PREFIX}idempotency_requests_total`,
      help: 'Requests of rules with idempotency=, by rule and result: sent (the key taken), replayed (TI\'s stored answer), in_flight (409), unknown (409 ORDER_OUTCOME_UNKNOWN), mismatch (422), missing or invalid (400), unavailable (503).',
      labelNames: ['rule', 'result'] as const,
      registers: [registry]
    }),
    idempotencyOutcomesUnknown: new Counter({
      name: `${METRIC_PREFIX}idempotency_outcomes_unknown_total`,
      help: 'Keyed requests written to TI that got no complete answer (timeout, cut, shutdown): their keys are held as unknown and never sent again.',
      labelNames: ['rule'] as const,
      registers: [registry]
    }),
    idempotencyKeysUnknown: new Gauge({
      name: `${METRIC_PREFIX}idempotency_keys_unknown`,
      help: 'Keys held as outcome unknown that this sidecar knows of (its own, and its state directory\'s), until they expire or an operator releases them.',
      registers: [registry],
      collect () { this.set(heldUnknown()) }
    }),
    idempotencyReleases: new Counter({
      name: `${METRIC_PREFIX}idempotency_releases_total`,
      help: 'Keys an operator released through the admin route POST /idempotency/release.',
      registers: [registry]
    }),
    policyRefused: new Counter({
      name: `${METRIC_PREFIX}policy_refused_total`,
      help: 'Requests refused 403 ROUTE_NOT_ALLOWED by the route policy (ALLOWED_ROUTES), by method.',
      labelNames: ['method'] as const,
      registers: [registry]
    }),
    /** Where idempotency_keys_unknown is read from. */
    measureUnknownKeys (fn: () => number): void { heldUnknown = fn }
  }
}
