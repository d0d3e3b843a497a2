// The request path's stages, as they hand a request on to each other. plugin.ts composes them
// in order; each stage is a file of its own (stages/), built from the path's options and this
// table of the others, through which a later stage (a 401 replay) can send a request again.
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify'
import type { Rule } from '../config/rate-limit-rules.js'
import type { Entry } from '../cache/entries.js'
import type { Serve } from '../cache/fill.js'
import type { Failure } from '../cache/flights.js'
import type { StatusParams } from '../cache/policy.js'
import type { CacheResult, ReadCache } from '../cache/read-cache.js'
import type { IdempotencyStage } from '../idempotency/stage.js'
import type { Metrics } from '../metrics.js'
import type { QuotaGuard, Ticket, Verdict } from '../quota/guard.js'
import type { createRateLimitFields } from '../quota/rate-limit-fields.js'
import type { TokenManager } from '../token/token-manager.js'
import type { RequestTracing } from '../tracing/request.js'
import type { HeldAnswer, Upstream } from '../upstream/forward.js'

export interface PathOptions {
  upstreamUrl: string
  tokens: TokenManager
  metrics: Metrics
  /** The upstream pool, owned by the caller (TLS verification, timeouts and the queue bound are set there). */
  upstream: Upstream
  accessLog: boolean
  /** 0 for no limit. */
  maxBodyBytes: number
  /** Budgets and cool-downs (src/quota/guard.ts). */
  quota: QuotaGuard
  /** Reuses TI's answers to GETs of rules with cache= (src/cache/); absent when no rule has it. */
  cache?: ReadCache
  /** One send per key on rules with idempotency= (src/idempotency/); absent when no rule has it. */
  idempotency?: IdempotencyStage
  /** RATE_LIMIT_HEADERS: RateLimit-Policy and RateLimit on every answer of a budgeted rule (src/quota/rate-limit-fields.ts). */
  rateLimitHeaders?: boolean
  /** With tracing on: the token waits as spans (src/tracing/request.ts; the rest is wrapped in app.ts). */
  tracing?: Pick<RequestTracing, 'tokenWait'>
}

/** What every stage is built from: the options, and the RateLimit fields when they are on. */
export interface StageOptions extends PathOptions {
  fields: ReturnType<typeof createRateLimitFields> | undefined
}

type Step = (request: FastifyRequest, reply: FastifyReply) => void

/** The stages' entry points, by the stage that owns each. */
export interface Path {
  /** plugin.ts: the path from the idempotency key on (also a replay's way back in). */
  proceed: Step
  /** plugin.ts: nothing (more) is sent for this request; its fetch's waiters and its key go free. */
  abandon: (request: FastifyRequest) => void
  /** stages/token.ts: the request's token, then `then` (with the reason, when none came). */
  withToken: (request: FastifyRequest, then: (err?: Error) => void) => void
  /** stages/keyed.ts: a keyed request its key lets through, sent once it has its token. */
  keyedSend: Step
  /** stages/budget.ts: the quota guard's verdict acted on: forwarded, or refused (or a stored answer stands in). */
  actOnVerdict: (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, verdict: Verdict) => void
  /** stages/cached.ts: a stored answer to a caller. */
  serveCached: (reply: FastifyReply, entry: Entry, method: string, params: StatusParams, result: CacheResult) => void
  /** stages/cached.ts: stored answers to this request's caller, while it is there. */
  serverFor: (request: FastifyRequest, reply: FastifyReply) => Serve | undefined
  /** stages/cached.ts: a waiter's answer when the fetch it waited for failed. */
  answerFailure: (request: FastifyRequest, reply: FastifyReply, failure: Failure) => void
  /** stages/upstream.ts: the one send to TI with the current token. */
  forward: (request: FastifyRequest, reply: FastifyReply, rule: Rule | undefined, ticket: Ticket | undefined) => void
  /** stages/replay.ts: holds a 401 back for a replay when one may follow, invalidating the token (true: held). */
  holdForReplay: (request: FastifyRequest, statusCode: number) => boolean
  /** stages/replay.ts: the request sent once more with a new token, or the 401 passed on. */
  replay: (request: FastifyRequest, reply: FastifyReply, answer: HeldAnswer) => void
  /** exchange.ts: an error of any stage as the caller's answer. */
  fail: (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void
}
