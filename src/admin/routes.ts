import type { FastifyInstance } from 'fastify'
import { isIP } from 'node:net'
import { StatusForbiddenError, sendError } from '../http/errors.js'
import type { StatusFrom } from '../config/schema.js'
import { systemClock, type Clock } from '../clock.js'
import type { Metrics } from '../metrics.js'
import type { QuotaGuard } from '../quota/guard.js'
import type { ReadCache } from '../cache/read-cache.js'
import type { IdempotencyStatus } from '../idempotency/stage.js'
import type { OverloadManager } from '../overload/manager.js'
import { statusDocument, type ConfigSummary } from './status.js'
import type { TokenManager, TokenState } from '../token/token-manager.js'

export interface AdminOptions {
  tokens: Pick<TokenManager, 'state'>
  metrics: Metrics
  /** Where budgets and cool-downs live, for /readyz's reason and /status. */
  quota?: Pick<QuotaGuard, 'status' | 'readinessNote' | 'readinessHold'>
  /** The read cache, when a rule has cache=: its copies on /status. */
  cache?: Pick<ReadCache, 'status'>
  /** Idempotent routes, when a rule has idempotency=: key counts on /status. */
  idempotency?: { status: () => IdempotencyStatus }
  /** The overload manager: /readyz's reason while it sheds, and /status. */
  overload?: Pick<OverloadManager, 'status' | 'readinessNote'>
  isDraining: () => boolean
  /** Shown on /status. */
  version: string
  /** The effective configuration, credentials only as their origin (status.ts configSummary). */
  config: ConfigSummary
  /** Serve /status (default true); false leaves it unrouted, so it answers 404. */
  statusEndpoint?: boolean
  /** STATUS_FROM (default loopback): any other peer gets 403. */
  statusFrom?: StatusFrom
  clock?: Clock
}

/**
 * Readiness, decided from the token state. Not ready until the first token is held.
 * After that, an outage of the token endpoint alone does not make the sidecar
 * unready: every replica shares the same IdP, so failing readiness would pull every
 * pod of the service out of rotation at once, for endpoints that never call TI too.
 * Callers get 503 TOKEN_UNAVAILABLE per request instead. Wrong credentials are
 * different — an operator's error that must show — so they fail readiness once no
 * valid token is left.
 */
export function readiness (state: TokenState, draining: boolean): { ready: boolean, reason: string } {
  if (draining) return { ready: false, reason: 'shutting down' }
  if (state.hasValidToken) return { ready: true, reason: 'token held' }
  if (state.credentialsRejected) return { ready: false, reason: 'client credentials rejected by the token endpoint' }
  if (state.lastFailure === 'proxy_rejected') return { ready: false, reason: 'egress proxy refused our credentials' }
  if (!state.everHadToken) return { ready: false, reason: 'waiting for the first access token' }
  return { ready: true, reason: 'token endpoint unavailable; callers get 503 until it recovers' }
}

/** Whether a peer's address is loopback: 127.0.0.0/8, ::1, or IPv4 loopback mapped into IPv6. */
export function isLoopbackPeer (address: string | undefined): boolean {
  if (address === undefined) return false
  const v4 = address.toLowerCase().replace(/^::ffff:/, '')
  if (isIP(v4) === 4) return v4.startsWith('127.')
  // Node writes a peer's IPv6 address in its shortest form.
  return address === '::1'
}

/**
 * A first start on a brand-new (or emptied) rate-limit Redis holds readiness for the few
 * seconds its tally needs to be trusted, rather than answer the first callers 429: on its
 * first contact a sidecar cannot tell a new Redis from one that lost the fleet's sends.
 */
function heldBy (result: { ready: boolean, reason: string }, hold: string | undefined): { ready: boolean, reason: string } {
  return result.ready && hold !== undefined ? { ready: false, reason: hold } : result
}

/** The admin listener's routes: cheap liveness, token-aware readiness, status, Prometheus metrics. */
export async function adminRoutes (
  app: FastifyInstance, { tokens, metrics, quota, cache, idempotency, overload, isDraining, version, config, statusEndpoint = true, statusFrom = 'loopback', clock = systemClock }: AdminOptions
): Promise<void> {
  const startedAt = clock.now()

  app.get('/livez', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    const state = tokens.state()
    const { ready, reason } = heldBy(readiness(state, isDraining()), quota?.readinessHold())
    // Redis unreachable leaves the sidecar ready (limits go on in memory): said, not failed.
    const note = quota?.readinessNote()
    // Shedding leaves it ready too: it is load, which pulling the pod would move to the others.
    const notes = [reason, note, overload?.readinessNote()].filter((text) => text !== undefined)
    reply.code(ready ? 200 : 503)
    return {
      status: ready ? 'ready' : 'not ready',
      reason: notes.join('; '),
      ...(quota === undefined ? {} : { rateLimits: { backend: quota.status().backend, note: note ?? null } }),
      token: {
        valid: state.hasValidToken,
        expiresAt: state.expiresAt === undefined ? null : new Date(state.expiresAt).toISOString(),
        consecutiveFailures: state.consecutiveFailures,
        lastFailure: state.lastFailure ?? null
      }
    }
  })

  // Always 200: the answer is about the sidecar, not a probe (readiness is in the body).
  // It needs no authentication and names URLs, paths and rules: STATUS_ENDPOINT=false turns it off.
  if (statusEndpoint) {
    app.get('/status', async (request, reply) => {
      // It shows the client id and the configuration: not for the pod network unless asked.
      if (statusFrom === 'loopback' && !isLoopbackPeer(request.socket.remoteAddress)) {
        sendError(reply, new StatusForbiddenError(), metrics)
        return reply
      }
      const token = tokens.state()
      reply.header('cache-control', 'no-store')
      return statusDocument({
        version,
        uptimeMs: clock.now() - startedAt,
        wallNow: clock.wallNow(),
        token,
        readiness: heldBy(readiness(token, isDraining()), quota?.readinessHold()),
        config,
        ...(quota === undefined ? {} : { rateLimits: quota.status() }),
        ...(cache === undefined ? {} : { cache: cache.status() }),
        ...(idempotency === undefined ? {} : { idempotency: idempotency.status() }),
        ...(overload === undefined ? {} : { overload: overload.status() })
      })
    })
  }

  app.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.registry.metrics()
  })
}
