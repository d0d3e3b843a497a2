// POST /idempotency/release on the admin listener: an operator frees a key held as outcome
// unknown (after finding out whether TI placed the order). Loopback only: the admin port is
// open to the pod network for probes and Prometheus, and whoever releases a key may cause a
// second order; `kubectl exec` or `kubectl port-forward` arrive from loopback.
import type { FastifyInstance } from 'fastify'
import { isLoopbackPeer } from './routes.js'

export interface ReleaseOptions {
  /** Frees the key of a rule (its id, `METHOD PATH` as written); false when none was held. */
  release: (rule: string, key: string) => Promise<boolean>
}

export async function idempotencyReleaseRoute (app: FastifyInstance, { release }: ReleaseOptions): Promise<void> {
  app.post('/idempotency/release', async (request, reply) => {
    reply.header('cache-control', 'no-store')
    if (!isLoopbackPeer(request.socket.remoteAddress)) {
      reply.code(403)
      return { error: 'LOOPBACK_ONLY', message: 'keys are released from the pod itself (kubectl exec, or kubectl port-forward)' }
    }
    const body = request.body as { rule?: unknown, key?: unknown } | undefined
    if (typeof body?.rule !== 'string' || typeof body.key !== 'string' || body.key === '') {
      reply.code(400)
      return { error: 'BAD_REQUEST', message: 'send {"rule": "POST /v2/store/orders", "key": "<the Idempotency-Key>"}' }
    }
    const released = await release(body.rule, body.key)
    request.log.warn({ rule: body.rule, released }, 'idempotency key released by an operator')
    reply.code(released ? 200 : 404)
    return { released }
  })
}
