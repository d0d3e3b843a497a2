// How an error of any stage becomes the caller's answer: the sidecar's own (errors.ts), or a
// 500 for what failed unexpectedly (logged), or a plain 400 for Fastify's or a plugin's own 4xx.
// A caller already gone gets nothing, and it is not a failure of ours.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import { BadRequestError, InternalError, isOwnError, sendError } from '../../errors.js'
import type { Metrics } from '../../metrics.js'
import { callerGone } from '../exchange.js'

export function createAnswers ({ metrics }: { metrics: Metrics }) {
  return {
    fail (error: FastifyError, request: FastifyRequest, reply: FastifyReply): void {
      // A caller that left mid-upload is ordinary client behaviour, not a failure of ours.
      if (callerGone(request)) {
        request.log.debug({ code: error.code, reason: error.message }, 'caller closed the connection before its request was sent')
        return
      }
      if (isOwnError(error)) {
        sendError(reply, error, metrics)
      } else if ((error.statusCode ?? 500) >= 500) {
        request.log.error({ err: error }, 'request failed')
        sendError(reply, new InternalError(), metrics)
      } else {
        // Fastify's or a plugin's own 4xx: its code and message (which may echo the URL) stay in the log.
        request.log.debug({ code: error.code, reason: error.message }, 'request refused')
        sendError(reply, new BadRequestError('the request is malformed'), metrics)
      }
    }
  }
}
