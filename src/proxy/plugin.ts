// The request path's scope: its stages composed, in order, from its stages (stages/, one file
// each; path.ts says what each hands on). Admission from the head and the route policy ran
// before, in server.ts's onRequest hooks.
//
//   onRequest   request.ts   the head: method, request target, headers
//   preHandler  request.ts   the body's size; a small one kept for a replay
//               token.ts     the token, unless the cache or an idempotency key answers first
//   handler     keyed.ts     the idempotency key: a replay, a refusal, or on (token then)
//               cached.ts    the read cache: a stored answer, a wait for a fetch, or a fetch
//               budget.ts    the quota guard: on, a local 429, or a stored answer standing in
//               upstream.ts  the one send to TI, and what each feature does with its answer
//               replay.ts    a 401 held back, the request sent once more with a new token
//   errors      exchange.ts  any stage's error as the caller's answer
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import fp from 'fastify-plugin'
import fastifyHttpProxy from '@fastify/http-proxy'
import { MethodNotAllowedError, sendError } from '../http/errors.js'
import { FORWARDED_METHODS } from '../http/rules.js'
import { createRateLimitFields } from '../quota/rate-limit-fields.js'
import { createAnswers, observeExchange, type Exchange } from './exchange.js'
import type { Path, PathOptions, StageOptions } from './path.js'
import { createBudgetStage } from './stages/budget.js'
import { createCacheStage } from './stages/cached.js'
import { createKeyedStage } from './stages/keyed.js'
import { createReplayStage } from './stages/replay.js'
import { createBodyStage, headProblem } from './stages/request.js'
import { createTokenStage } from './stages/token.js'
import { createUpstreamStage } from './stages/upstream.js'

export {
  callerGone, DISCARD_BODY_MS, forwardedPath, observeExchange, REPLAY_BODY_MAX_BYTES, REPLAY_BUFFER_TOTAL_BYTES, type Exchange
} from './exchange.js'
export type { PathOptions } from './path.js'

async function requestPath (app: FastifyInstance, pathOptions: PathOptions): Promise<void> {
  const { upstreamUrl, metrics, accessLog, quota, idempotency } = pathOptions
  // RateLimit fields: on admission, a stored answer and a local refusal (src/quota/rate-limit-fields.ts).
  const fields = pathOptions.rateLimitHeaders === true ? createRateLimitFields((rule) => quota.budget(rule)) : undefined
  const options: StageOptions = { ...pathOptions, fields }

  // The stages, each built from the options and this table of the others (filled below).
  const path = {} as Path
  const body = createBodyStage(options)
  const token = createTokenStage(options)
  const keyed = createKeyedStage(options, path)
  const cached = createCacheStage(options, path)
  const budget = createBudgetStage(options, path)
  const upstream = createUpstreamStage(options, path)
  const replay = createReplayStage(options, path)
  const answers = createAnswers(options)
  Object.assign(path, {
    proceed,
    abandon,
    withToken: token.withToken,
    keyedSend: keyed.keyedSend,
    actOnVerdict: budget.actOnVerdict,
    serveCached: cached.serveCached,
    serverFor: cached.serverFor,
    answerFailure: cached.answerFailure,
    forward: upstream.forward,
    holdForReplay: replay.holdForReplay,
    replay: replay.replay,
    fail: answers.fail
  } satisfies Path)

  /**
   * The path from the idempotency key on, for a request with its body read (and its token,
   * unless the cache or a key answers first); a 401 replay comes back here.
   */
  function proceed (request: FastifyRequest, reply: FastifyReply): void {
    // The caller left while its body was read or a token awaited: nothing is sent for it.
    // (A cache fill's replay goes on for those who wait for it: its first send already went.)
    if (request.exchange.gone && !(request.fill !== null && request.replayed)) {
      abandon(request)
      return
    }
    const keyedRule = keyed.keyedRule(request)
    if (keyedRule !== undefined) {
      keyed.judge(request, reply, keyedRule)
      return
    }
    if (!quota.active) {
      upstream.forward(request, reply, undefined, undefined)
      return
    }
    const cacheRule = cached.cacheRule(request)
    if (cacheRule !== undefined) {
      cached.ask(request, reply, cacheRule)
      return
    }
    budget.askQuota(request, reply)
  }

  /**
   * Nothing (more) is sent for this request: those waiting for its fetch go on by themselves,
   * and its key is free again (also after TI's 401, when the exchange's close has passed).
   */
  function abandon (request: FastifyRequest): void {
    request.fill?.flight.settle(undefined)
    idempotency?.unsent(request.claim)
  }

  /** preHandler: the body, then the token (unless the cache or an idempotency key may answer without one). */
  function prepare (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    body.read(request, reply).then(() => {
      if (cached.cacheRule(request) !== undefined || keyed.keyedRule(request) !== undefined) done()
      else token.withToken(request, done)
    }, done)
  }

  // Stryker disable next-line CallExpression,StringLiteral: equivalent: only declares the property; onRequest sets it on every request before anything reads it
  app.decorateRequest('exchange', null as unknown as Exchange)
  // Stryker disable next-line CallExpression,StringLiteral: equivalent: the token stage sets it before any forwarding, the only place it is read
  app.decorateRequest('token', null)
  app.decorateRequest('replayBody', null)
  // Stryker disable next-line CallExpression,StringLiteral: equivalent: http-proxy's handler sets it before any forwarding, the only place it is read
  app.decorateRequest('upstreamPath', null)
  // Stryker disable next-line StringLiteral: equivalent: undefined reads as false, like the default
  app.decorateRequest('replayed', false)
  app.decorateRequest('fill', null)
  app.decorateRequest('claim', null)
  app.setErrorHandler(answers.fail)
  app.setNotFoundHandler((request, reply) => {
    sendError(reply, new MethodNotAllowedError(request.method), metrics)
  })
  // The request path never parses, decodes or re-encodes a body, whatever its type: every
  // body reaches the preHandler as the caller's byte stream (MAX_BODY_BYTES is the
  // only limit). http-proxy's own parsers cover only JSON and the catch-all; Fastify's
  // text/plain one would remain, with its 1 MiB limit and its UTF-8 decoding.
  // Stryker disable next-line CallExpression: equivalent while headProblem drops the parsed Content-Type: only the catch-all is ever asked
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })

  app.addHook('onRequest', function observe (request, reply, done) {
    request.exchange = observeExchange(request, reply.raw, metrics, accessLog, body.release)
    done(headProblem(request))
  })

  await app.register(fastifyHttpProxy, {
    upstream: upstreamUrl,
    // http-proxy routes every path and method, refuses destinations that would leave
    // UPSTREAM_URL's base path and runs the preHandler; upstream.ts sends the request
    // (its reply-from stays unused). Bodies: see the content-type parser above.
    // Stryker disable next-line BooleanLiteral: equivalent: http-proxy's own parsers pass the payload through untouched too
    proxyPayloads: false,
    httpMethods: [...FORWARDED_METHODS],
    preHandler: prepare,
    handler: (request, reply, dest) => {
      request.upstreamPath = dest
      proceed(request, reply)
    }
  })
}

// Stryker disable next-line ObjectLiteral,StringLiteral,BooleanLiteral: equivalent: the request path is the last and only routed plugin on its server; fastify-plugin's name, range and encapsulation change nothing a request meets
export default fp(requestPath, { name: 'store-auth-proxy', fastify: '5.x', encapsulate: true })
