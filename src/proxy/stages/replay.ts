// The 401 replay: a 401 may mean the token was revoked early, or something else entirely
// (Apigee's InvalidApiKeyForGivenResource: the app is not subscribed to that API). The token
// manager keeps the held token and refreshes (once, whatever the concurrency: the generation
// check); the 401 is held back, and the request sent once more with the new token if one comes
// and its body was kept, or the 401 passed on if none does.
import type { FastifyReply, FastifyRequest } from 'fastify'
import { sendHeld, type HeldAnswer } from '../../upstream/forward.js'
import { callerGone } from '../exchange.js'
import type { Path, StageOptions } from '../path.js'

export function createReplayStage ({ tokens, idempotency, cache }: Pick<StageOptions, 'tokens' | 'idempotency' | 'cache'>, path: Path) {
  return {
    holdForReplay (request: FastifyRequest, statusCode: number): boolean {
      const token = request.token
      return statusCode === 401 && !request.replayed && token !== null &&
        (request.body === undefined || request.replayBody !== null) &&
        tokens.invalidate(token.generation)
    },

    replay (request: FastifyRequest, reply: FastifyReply, answer: HeldAnswer): void {
      // A cache fill is replayed for those who wait for it, whether its own caller is there or
      // not; with its caller gone and nobody waiting, nothing more is sent.
      const fill = request.fill
      const forOthers = (): boolean => fill !== null && fill.flight.waiting() > 0
      // Nobody is left to ask again for: the 401 was the fetch's answer.
      if (callerGone(request) && !forOthers()) {
        path.abandon(request)
        return
      }
      request.replayed = true
      const rejected = request.token?.generation ?? 0
      void tokens.renewed(rejected).then((fresh) => {
        if (callerGone(request) && !forOthers()) {
          path.abandon(request)
          return
        }
        if (fresh === undefined) {
          request.fill?.flight.fail({ answer })
          // idempotency: the 401 is the answer, and TI did not act on it: the key is free again.
          idempotency?.unsent(request.claim)
          if (callerGone(request)) return
          // No newer token came: the caller gets the upstream's own answer.
          reply.hijack()
          sendHeld(reply.raw, answer)
          return
        }
        request.log.debug({ generation: fresh.generation }, 'replaying a request rejected with 401 with a new token')
        request.token = fresh
        path.proceed(request, reply)
      })
    }
  }
}
