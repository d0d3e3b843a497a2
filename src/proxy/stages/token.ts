// The token stage: the one access token a request is sent with, the one held or the next one
// (every waiting request shares the token request, within TOKEN_WAIT_MS). Asked only once a
// request will be sent: a stored answer, a replay or a key's refusal needs none.
import type { FastifyRequest } from 'fastify'
import type { StageOptions } from '../path.js'

export function createTokenStage ({ tokens, tracing }: Pick<StageOptions, 'tokens' | 'tracing'>) {
  return {
    withToken (request: FastifyRequest, then: (err?: Error) => void): void {
      const token = tokens.current()
      if (token !== undefined) {
        request.token = token
        then()
        return
      }
      const waiting = tokens.get()
      tracing?.tokenWait(request, waiting)
      waiting.then((fresh) => {
        request.token = fresh
        then()
      }, then)
    }
  }
}
