// The idempotency stage's place in the path (src/idempotency/stage.ts holds the keys): a request
// on a rule with idempotency= is judged by its key before anything is spent and before the token
// is asked for. A replay or a refusal is answered there; a request its key lets through gets
// its token and goes on, or, with none, is refused unsent and its key freed.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import type { KeyedRule } from '../../idempotency/stage.js'
import type { Path, StageOptions } from '../path.js'

export function createKeyedStage ({ idempotency }: Pick<StageOptions, 'idempotency'>, path: Path) {
  /** A keyed request its key lets through: sent once it has its token. */
  function keyedSend (request: FastifyRequest, reply: FastifyReply): void {
    path.withToken(request, (err) => {
      if (err === undefined) {
        path.proceed(request, reply)
        return
      }
      idempotency?.unsent(request.claim)
      path.fail(err as FastifyError, request, reply)
    })
  }

  return {
    /** The idempotent rule whose key this request has yet to be judged by (none: no key to take, or taken). */
    keyedRule (request: FastifyRequest): KeyedRule | undefined {
      return request.claim === null ? idempotency?.ruleFor(request.method, request.raw.url ?? '/') : undefined
    },
    /** Judges the request by its key: answered here, or sent on (keyedSend). */
    judge (request: FastifyRequest, reply: FastifyReply, rule: KeyedRule): void {
      void idempotency?.decide(request, reply, rule).then((go) => { if (go) keyedSend(request, reply) })
    },
    keyedSend
  }
}
