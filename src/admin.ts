import type { FastifyInstance } from 'fastify'
import type { Metrics } from './metrics.js'
import type { TokenManager, TokenState } from './token/token-manager.js'

export interface AdminOptions {
  tokens: Pick<TokenManager, 'state'>
  metrics: Metrics
  isDraining: () => boolean
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
  if (!state.everHadToken) return { ready: false, reason: 'waiting for the first access token' }
  return { ready: true, reason: 'token endpoint unavailable; callers get 503 until it recovers' }
}

/** The admin listener's routes: cheap liveness, token-aware readiness, Prometheus metrics. */
export async function adminRoutes (app: FastifyInstance, { tokens, metrics, isDraining }: AdminOptions): Promise<void> {
  app.get('/livez', async () => ({ status: 'ok' }))

  app.get('/readyz', async (_request, reply) => {
    const state = tokens.state()
    const { ready, reason } = readiness(state, isDraining())
    reply.code(ready ? 200 : 503)
    return {
      status: ready ? 'ready' : 'not ready',
      reason,
      token: {
        valid: state.hasValidToken,
        expiresAt: state.expiresAt === undefined ? null : new Date(state.expiresAt).toISOString(),
        consecutiveFailures: state.consecutiveFailures,
        lastFailure: state.lastFailure ?? null
      }
    }
  })

  app.get('/metrics', async (_request, reply) => {
    reply.type(metrics.registry.contentType)
    return metrics.registry.metrics()
  })
}
