// The first stage of the proxy scope, from the request's head alone (onRequest): refused before
// anything is read are TRACE (the upstream would echo the token back) and every method outside
// the forwarded set, whatever Fastify thinks of it (QUERY); a request target that is not a plain
// path below UPSTREAM_URL; headers that are not what they claim.
import type { FastifyRequest } from 'fastify'
import { BadRequestError, MethodNotAllowedError } from '../../errors.js'
import { FORWARDED_METHODS, requestHeadersProblem, requestTargetProblem } from '../../http/rules.js'

const FORWARDED = new Set<string>(FORWARDED_METHODS)

/** Why the request is refused from its head, or undefined: it goes on. */
export function headProblem (request: FastifyRequest): Error | undefined {
  if (!FORWARDED.has(request.method)) return new MethodNotAllowedError(request.method)
  const problem = requestTargetProblem(request.url) ?? requestHeadersProblem(request.raw.rawHeaders)
  if (problem !== undefined) return new BadRequestError(problem)
  // Fastify checks a Content-Type's syntax before any parser runs (415 for `foo`); the
  // type is the upstream's business. It is still forwarded: headers go from rawHeaders.
  delete request.raw.headers['content-type']
  return undefined
}
