// Connections through the egress proxy (settings and routing: egress-proxy.ts): a CONNECT
// tunnel for https:// targets (TLS verified end to end, the egress proxy sees only the tunnel),
// the absolute form for http:// targets (RFC 9112 §3.2.2).
//
// Built on undici's own CONNECT client (`Pool#connect`) and TLS-over-a-socket connector
// (`buildConnector({ httpSocket })`), the two calls undici's ProxyAgent makes, rather than
// on ProxyAgent itself: ProxyAgent.dispatch turns a flat header list into an object, so a
// repeated header would reach the upstream once (last value wins); it hides the per-origin
// Pool inside an Agent, where the forwarder's bounded queue cannot read its stats; and a
// refused CONNECT is a RequestAbortedError with the status only in its message text. Here
// the forwarder keeps its own Pool, request bytes and socket hooks, and every failure of
// the egress proxy itself is a named error (http/errors.ts).
import type { Socket } from 'node:net'
import { buildConnector, Pool, type Dispatcher } from 'undici'
import { defaultPort, type Route } from './route.js'
import {
  EgressProxyAuthError, EgressProxyRefusedError, EgressProxyTimeoutError, EgressProxyUnreachableError
} from '../http/errors.js'

export interface EgressConnection {
  /** The origin a Pool connects to: the target's, or the egress proxy's for the absolute form. */
  readonly origin: string
  /** Opens one connection (direct, or a CONNECT tunnel), TLS verified for https:// targets. */
  readonly connect: buildConnector.connector
  /** For the absolute form: how each request is rewritten, else undefined. */
  readonly absoluteForm: { readonly prefix: string, readonly authorization: string | undefined } | undefined
  readonly close: () => Promise<void>
}

export interface EgressConnectionOptions {
  /** Bounds the TCP and TLS connects, and the egress proxy's answer to a CONNECT. */
  connectTimeoutMs: number
}

/** How to reach `target` (an origin or a URL): direct, through a CONNECT tunnel, or in absolute form. */
export function egressConnection (target: string, route: Route, { connectTimeoutMs }: EgressConnectionOptions): EgressConnection {
  const url = new URL(target)
  // TLS is verified (undici's default, stated here so nothing else can turn it off).
  const direct = buildConnector({ rejectUnauthorized: true, timeout: connectTimeoutMs })
  if (route.via === 'direct') {
    return { origin: url.origin, connect: direct, absoluteForm: undefined, close: async () => {} }
  }
  // The credentials were decoded once, in config (config/egress-proxy.ts).
  const authorization = route.proxy.authorization
  const egressProxyOrigin = new URL(route.proxy.href).origin
  if (url.protocol === 'http:') {
    // Plain HTTP goes in absolute form through the egress proxy, which then sees the request.
    return {
      origin: egressProxyOrigin,
      connect: failuresNamed(direct),
      absoluteForm: { prefix: url.origin, authorization },
      close: async () => {}
    }
  }
  const toEgressProxy = new Pool(egressProxyOrigin, {
    connect: failuresNamed(direct),
    // The egress proxy's answer to a CONNECT: one that takes the connection and stays silent times out.
    headersTimeout: connectTimeoutMs
  })
  return {
    origin: url.origin,
    connect: (options, callback) => {
      const authority = `${options.hostname}:${options.port === '' ? defaultPort(options.protocol) : options.port}`
      toEgressProxy.connect({
        path: authority,
        headers: { host: authority, ...(authorization === undefined ? {} : { 'proxy-authorization': authorization }) }
      }).then(({ statusCode, socket }) => {
        if (statusCode !== 200) {
          socket.destroy()
          callback(connectRefusal(statusCode), null)
          return
        }
        // TLS to the target itself, through the tunnel: verified against the target's name.
        direct({ ...options, httpSocket: socket as Socket }, callback)
      }, (err: unknown) => { callback(egressProxyFailure(err), null) })
    },
    absoluteForm: undefined,
    close: () => toEgressProxy.close()
  }
}

/** A connector whose failures to reach the egress proxy are named as such. */
function failuresNamed (connect: buildConnector.connector): buildConnector.connector {
  return (options, callback) => {
    connect(options, (err, socket) => {
      if (err !== null) callback(egressProxyFailure(err), null)
      else callback(null, socket)
    })
  }
}

const TIMEOUTS = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'ETIMEDOUT'])

function egressProxyFailure (err: unknown): Error {
  if (err instanceof EgressProxyUnreachableError || err instanceof EgressProxyTimeoutError) return err
  const code = (err as { code?: string }).code ?? ''
  return TIMEOUTS.has(code) ? new EgressProxyTimeoutError({ cause: err }) : new EgressProxyUnreachableError({ cause: err })
}

/**
 * A CONNECT the egress proxy answered other than 200: 407, our credentials (401 too: the target is
 * not reached yet, so it can only be the egress proxy's, and tinyproxy answers wrong credentials
 * so); a 5xx, the egress proxy could not reach the target (the target is what is unreachable);
 * any other, the egress proxy's refusal.
 */
export function connectRefusal (statusCode: number): Error {
  if (statusCode === 407 || statusCode === 401) return new EgressProxyAuthError(statusCode)
  if (statusCode >= 500) {
    // Mapped like any upstream that cannot be reached (UPSTREAM_UNREACHABLE); the code says where.
    return Object.assign(new Error(`the egress proxy could not reach the target (${statusCode})`), { code: 'EGRESS_TARGET_UNREACHABLE' })
  }
  return new EgressProxyRefusedError(statusCode)
}

/** Adds the egress proxy's credentials to a request's headers, flat list or object, as given. */
function withHeader (headers: Dispatcher.DispatchOptions['headers'], name: string, value: string): Dispatcher.DispatchOptions['headers'] {
  if (headers == null) return [name, value]
  if (Array.isArray(headers)) return [...(headers as string[]), name, value]
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    return [...(headers as Iterable<[string, string | string[] | undefined]>), [name, value]] as Dispatcher.DispatchOptions['headers']
  }
  return { ...(headers as Record<string, string | string[] | undefined>), [name]: value }
}

/**
 * A request in absolute form: the path becomes the target's URL, the egress proxy's credentials
 * go in Proxy-Authorization, and a 407 is the egress proxy's refusal (RFC 9110 §15.5.8: only a
 * proxy sends it), never an answer to pass on.
 */
export function absoluteFormRequest<T extends Dispatcher.DispatchOptions> (
  request: T, absoluteForm: NonNullable<EgressConnection['absoluteForm']>
): T {
  const { prefix, authorization } = absoluteForm
  return {
    ...request,
    path: prefix + request.path,
    headers: authorization === undefined ? request.headers : withHeader(request.headers, 'proxy-authorization', authorization)
  }
}

/** Wraps a dispatch handler so that a 407 in absolute form fails the request with EgressProxyAuthError. */
export function refusingProxyAuth (handler: Dispatcher.DispatchHandler): Dispatcher.DispatchHandler {
  return {
    ...bound(handler),
    onResponseStart (controller, statusCode, headers, statusMessage) {
      if (statusCode === 407) {
        controller.abort(new EgressProxyAuthError(407))
        return
      }
      handler.onResponseStart?.(controller, statusCode, headers, statusMessage)
    }
  }
}

function bound (handler: Dispatcher.DispatchHandler): Dispatcher.DispatchHandler {
  const out: Record<string, unknown> = {}
  for (const key of ['onRequestStart', 'onRequestUpgrade', 'onResponseData', 'onResponseEnd', 'onResponseError'] as const) {
    const fn = handler[key]
    if (typeof fn === 'function') out[key] = fn.bind(handler)
  }
  return out as Dispatcher.DispatchHandler
}

/**
 * A dispatcher for one target (the token endpoint), going the way `route` says; in
 * absolute form each request is rewritten (absoluteFormRequest). `close` releases the
 * connections to the target and to the egress proxy.
 */
export function egressDispatcher (target: string, route: Route, options: EgressConnectionOptions): { dispatcher: Dispatcher, close: () => Promise<void> } {
  const connection = egressConnection(target, route, options)
  const pool = new Pool(connection.origin, { connect: connection.connect })
  const absoluteForm = connection.absoluteForm
  const dispatcher = absoluteForm === undefined
    ? pool
    : pool.compose((dispatch) => (opts, handler) => dispatch(absoluteFormRequest(opts, absoluteForm), refusingProxyAuth(handler)))
  return { dispatcher, close: async () => { await Promise.all([pool.close(), connection.close()]) } }
}
