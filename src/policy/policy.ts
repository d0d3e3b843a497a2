// The route policy (ALLOWED_ROUTES): a credential that only needs reads cannot place orders.
// Every request outside the allow-list is refused 403 ROUTE_NOT_ALLOWED the moment it arrives,
// before its body is read, a token asked or a budget spent; logged and counted. The list
// uses the budgets' matcher (src/config/rate-limit-rules.ts), normalised the same way.
import type { FastifyInstance } from 'fastify'
import type { Logger } from 'pino'
import { matchRule } from '../config/rate-limit-rules.js'
import type { RoutePolicy } from '../config/orders.js'
import { RouteNotAllowedError, sendError } from '../http/errors.js'
import { methodLabel, type Metrics } from '../metrics.js'
import { observeExchange } from '../proxy/plugin.js'

/** Whether the policy lets this method and target go upstream. */
export function allowed (policy: RoutePolicy, method: string, target: string): boolean {
  return policy.allowed === undefined || matchRule(policy.allowed, method, target) !== undefined
}

/** The proxy listener's first word on a request outside the allow-list (like the overload manager's shedding). */
export function enforcePolicy (server: FastifyInstance, policy: RoutePolicy, metrics: Metrics, accessLog: boolean, log: Logger): void {
  if (policy.allowed === undefined) return
  server.addHook('onRequest', function policed (request, reply, done) {
    if (allowed(policy, request.method, request.url)) {
      done()
      return
    }
    metrics.policyRefused.inc({ method: methodLabel(request.method) })
    log.warn({ method: request.method, rule: 'ALLOWED_ROUTES' }, 'request refused by the route policy')
    observeExchange(request, reply.raw, metrics, accessLog)
    sendError(reply, new RouteNotAllowedError(request.method), metrics)
  })
}
