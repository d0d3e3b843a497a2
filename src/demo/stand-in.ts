import { randomBytes, randomUUID } from 'node:crypto'
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { TOKEN_PATH } from '../config/urls.js'
import { CATALOG, findProduct, fullCatalogBody, priced } from './catalog.js'

/**
 * A stand-in for TI's OAuth API and store API, enforcing the token contract the
 * way the Apigee gateway would: the exact raw form body, no query string, tokens
 * that expire, and an Apigee-style 401 for a missing token ("Invalid access token") and
 * for an unknown or expired one ("Access Token expired").
 * Used by `npm run demo`, the tests and docker-compose.
 */
export interface StandInOptions {
  clientId: string
  clientSecret: string
  /** Token validity; the contract's 60 minutes unless shortened for demos and tests. */
  tokenLifetimeMs?: number
  /** `ti`: TI's documented answer (`expires_in` a number); `apigee`: stock Apigee (every value a string). */
  style?: 'ti' | 'apigee'
  now?: () => number
  logger?: Logger
  /** Serve HTTPS with this key and certificate (tests of TLS verification). */
  tls?: { key: string, cert: string }
}

export const DEFAULT_TOKEN_LIFETIME_MS = 60 * 60_000

const EXPIRED_FAULT = {
  fault: {
    faultstring: 'Access Token expired',
    detail: { errorcode: 'keymanagement.service.access_token_expired' }
  }
}
// Apigee's VerifyAccessToken answer when the request carries no bearer token at all.
const MISSING_TOKEN_FAULT = {
  fault: {
    faultstring: 'Invalid access token',
    detail: { errorcode: 'oauth.v2.InvalidAccessToken' }
  }
}
const INVALID_CLIENT = { ErrorCode: 'invalid_client', Error: 'ClientId is Invalid' }

export interface StandIn {
  app: FastifyInstance
  /** Token requests answered with a token so far. */
  tokensIssued: () => number
  /** Invalidates every token issued so far, as a revocation at the gateway would. */
  revokeAll: () => void
  /** Accepts only this secret from now on, as a secret rotation at the gateway would. */
  setClientSecret: (secret: string) => void
}

export function createStandIn (options: StandInOptions): StandIn {
  const {
    clientId, clientSecret, tokenLifetimeMs = DEFAULT_TOKEN_LIFETIME_MS, style = 'ti',
    now = Date.now, logger, tls
  } = options
  let expectedBody = `grant_type=client_credentials&client_id=${clientId}&client_secret=${clientSecret}`
  const tokens = new Map<string, number>()
  const orders = new Map<string, unknown>()
  let issued = 0

  const app = Fastify({
    ...(tls === undefined ? {} : { https: tls }),
    ...(logger === undefined ? {} : { loggerInstance: logger as FastifyBaseLogger }),
    logController: new LogController({ disableRequestLogging: true })
  }) as unknown as FastifyInstance

  // The token endpoint reads the body as the raw string the client sent.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: 4096 },
    (_request, body, done) => { done(null, body) })

  // Unauthenticated liveness for container healthchecks.
  app.get('/healthz', async () => ({ status: 'ok' }))

  app.post(TOKEN_PATH, async (request, reply) => {
    if (request.url.includes('?')) {
      return reply.code(400).send({ ErrorCode: 'invalid_request', Error: 'Query parameters are not allowed' })
    }
    if (request.headers['content-type'] !== 'application/x-www-form-urlencoded') {
      return reply.code(400).send({ ErrorCode: 'invalid_request', Error: 'Content-Type must be application/x-www-form-urlencoded' })
    }
    if (request.body !== expectedBody) return reply.code(401).send(INVALID_CLIENT)

    const accessToken = randomBytes(21).toString('base64url')
    const issuedAt = now()
    tokens.set(accessToken, issuedAt + tokenLifetimeMs)
    prune(issuedAt)
    issued += 1
    // "slightly under the 60-minute validity" (contract §2).
    const expiresIn = Math.max(1, Math.ceil(tokenLifetimeMs / 1000) - 1)
    const answer = {
      access_token: accessToken,
      token_type: style === 'ti' ? 'bearer' : 'BearerToken',
      expires_in: style === 'ti' ? expiresIn : String(expiresIn),
      scope: '',
      application_name: 'store-auth-proxy-demo',
      'developer.email': 'developer@example.com',
      issued_at: String(issuedAt),
      client_id: clientId
    }
    return answer
  })

  function prune (at: number): void {
    if (tokens.size < 1000) return
    for (const [token, expiresAt] of tokens) if (expiresAt <= at) tokens.delete(token)
  }

  function requireToken (request: FastifyRequest, reply: FastifyReply, done: () => void): void {
    const match = /^Bearer ([^\s]+)$/i.exec(request.headers.authorization ?? '')
    if (match?.[1] === undefined) {
      void reply.code(401).send(MISSING_TOKEN_FAULT)
      return
    }
    const expiresAt = tokens.get(match[1])
    if (expiresAt === undefined || expiresAt <= now()) {
      void reply.code(401).send(EXPIRED_FAULT)
      return
    }
    done()
  }

  app.register(async (store) => {
    store.addHook('onRequest', requireToken)

    store.get<{ Querystring: { currency?: string } }>('/v2/store/products', async (request) => ({
      products: CATALOG.map((p) => priced(p, request.query.currency))
    }))

    // The catalog TI allows once per 4 hours (the read cache's case): realistic in size.
    store.get('/v2/store/products/catalog', async (_request, reply) => reply.type('application/json').send(fullCatalogBody()))

    store.get<{ Params: { partNumber: string }, Querystring: { currency?: string } }>(
      '/v2/store/products/:partNumber', async (request, reply) => {
        const product = findProduct(request.params.partNumber)
        if (product === undefined) {
          return reply.code(404).send({ errors: [{ type: 'NotFound', message: `Product ${request.params.partNumber} not found` }] })
        }
        return priced(product, request.query.currency)
      })

    store.post<{ Body: { lineItems?: Array<{ tiPartNumber?: string, quantity?: number }> } }>(
      '/v2/store/orders', async (request, reply) => {
        const lineItems = request.body?.lineItems
        if (!Array.isArray(lineItems) || lineItems.length === 0 ||
            !lineItems.every((l) => typeof l.tiPartNumber === 'string' && findProduct(l.tiPartNumber) !== undefined &&
              Number.isInteger(l.quantity) && (l.quantity ?? 0) > 0)) {
          return reply.code(400).send({ errors: [{ type: 'BadRequest', message: 'lineItems must name known parts with positive quantities' }] })
        }
        const order = { orderNumber: randomUUID(), orderStatus: 'Processing', lineItems }
        orders.set(order.orderNumber, order)
        return reply.code(201).send(order)
      })

    store.get<{ Params: { orderNumber: string } }>('/v2/store/orders/:orderNumber', async (request, reply) => {
      const order = orders.get(request.params.orderNumber)
      if (order === undefined) return reply.code(404).send({ errors: [{ type: 'NotFound', message: 'Order not found' }] })
      return order
    })
  })

  return {
    app,
    tokensIssued: () => issued,
    revokeAll: () => { tokens.clear() },
    setClientSecret: (secret) => {
      expectedBody = `grant_type=client_credentials&client_id=${clientId}&client_secret=${secret}`
    }
  }
}
