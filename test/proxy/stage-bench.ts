// One stage of the request path on a bench: a Fastify app with the path's request decorations,
// whose one route hands each request to the stage as the path would, the other stages a
// recording table. For the turns a whole sidecar reaches only by a race (a caller gone between
// two awaits, a guard that throws): the test sets the request's state, then acts.
import type { FastifyReply, FastifyRequest } from 'fastify'
import Fastify from 'fastify'
import type { Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import type { Exchange } from '../../src/proxy/exchange.js'
import type { Path, StageOptions } from '../../src/proxy/path.js'
import { captureLogs } from '../helpers/logs.js'

export interface Answered {
  status: number
  headers: Record<string, unknown>
  body: string
}

/** What the route answers when the stage sent nothing (and hijacked nothing). */
export const UNTOUCHED = 204

export type Call = [string, ...unknown[]]

/** How the caller asks: GET with no body unless said. */
export interface Sent { method?: 'GET' | 'POST', headers?: Record<string, string>, body?: string }

export function stageBench (t: Test) {
  const logs = captureLogs()
  const metrics = createMetrics({ defaultMetrics: false })
  /** The other stages' entry points, as the stage under test called them. */
  const calls: Call[] = []
  const record = (name: string) => (...args: unknown[]): void => { calls.push([name, ...args.slice(2)]) }
  const path = {
    proceed: record('proceed'),
    abandon: (request: FastifyRequest) => { calls.push(['abandon', request.url]) },
    forward: (_request: FastifyRequest, reply: FastifyReply, ...rest: unknown[]) => {
      calls.push(['forward', ...rest])
      void reply.code(200).send('forwarded')
    },
    serveCached: (reply: FastifyReply, ...rest: unknown[]) => {
      calls.push(['serveCached', ...rest])
      void reply.code(200).send('served')
    }
  } as unknown as Path
  let act: (request: FastifyRequest, reply: FastifyReply) => void = () => {}

  const app = Fastify({ loggerInstance: logs.log })
  app.decorateRequest('exchange', null as unknown as Exchange)
  app.decorateRequest('fill', null)
  app.decorateRequest('replayed', false)
  app.decorateRequest('claim', null)
  // Bodies reach the stage as the caller's byte stream, as on the request path.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('*', (_request, payload, done) => { done(null, payload) })
  async function handler (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    request.exchange = { gone: false, truncated: false, reservedBytes: 0 }
    act(request, reply)
    // Whatever the stage does later (a verdict's promise) is done within a few turns.
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
    if (reply.raw.headersSent) return reply
    // Hijacked and then left unanswered (its caller is gone): the bench still ends the exchange.
    if (reply.sent) reply.raw.writeHead(UNTOUCHED).end()
    else await reply.code(UNTOUCHED).send()
    return reply
  }
  app.route({ method: ['GET', 'POST'], url: '/*', handler })
  t.teardown(() => app.close())

  return {
    logs,
    metrics,
    calls,
    path,
    /** The stage's options: the metrics and no RateLimit fields, with the test's own fakes. */
    options: (own: Partial<StageOptions>): StageOptions => ({ metrics, fields: undefined, ...own }) as StageOptions,
    /** One request for `url`, handed to `then` as the path would. */
    async run (url: string, then: (request: FastifyRequest, reply: FastifyReply) => void, sent: Sent = {}): Promise<Answered> {
      act = then
      const res = await app.inject({ method: sent.method ?? 'GET', url, headers: sent.headers ?? {}, ...(sent.body === undefined ? {} : { payload: sent.body }) })
      return { status: res.statusCode, headers: res.headers, body: res.body }
    },
    names: () => calls.map((c) => c[0])
  }
}
