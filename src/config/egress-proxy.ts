// The corporate egress proxy's settings: HTTPS_PROXY / HTTP_PROXY / NO_PROXY (and their
// lower-case forms), read from the env object main.ts passes in, parsed once here so that
// check-config and serve run the same checks: routing is in egress/route.ts, the
// connections through the egress proxy in egress/connection.ts.
import { BAD_ESCAPE, userInfo } from './url-credentials.js'

type Env = Record<string, string | undefined>

export interface EgressProxyUrl {
  /** The URL as given, credentials included: never log or show it (see `display`). */
  readonly href: string
  /** scheme://host:port: what logs, /status and check-config show. */
  readonly display: string
  /** The variable it came from. */
  readonly from: string
  /** Proxy-Authorization for it (Basic, RFC 9110 §11.7.1), from its user and password; undefined without. */
  readonly authorization: string | undefined
}

export interface EgressProxy {
  /** For https:// targets. */
  readonly httpsProxy: EgressProxyUrl | undefined
  /** For http:// targets. */
  readonly httpProxy: EgressProxyUrl | undefined
  /** NO_PROXY as given (hosts, never credentials), '' when unset. */
  readonly noProxy: string
}

export const NO_EGRESS_PROXY: EgressProxy = Object.freeze({ httpsProxy: undefined, httpProxy: undefined, noProxy: '' })

// Lower case first, as curl, wget, Python and undici read them (Go reads upper case first:
// the two differ only when both are set, to different values).
const NAMES = {
  https: ['https_proxy', 'HTTPS_PROXY'],
  http: ['http_proxy', 'HTTP_PROXY'],
  no: ['no_proxy', 'NO_PROXY']
} as const

/** The standard variables read (upper-case spelling), outside the sidecar's own schema. */
export const EGRESS_VARIABLES: readonly string[] = Object.values(NAMES).map((names) => names[1])

function first (env: Env, names: readonly string[]): { name: string, value: string } | undefined {
  for (const name of names) {
    const value = env[name]?.trim()
    if (value !== undefined && value !== '') return { name, value }
  }
  return undefined
}

/**
 * Reads the egress proxy variables from `env`. Each problem is pushed to `problems` (load.ts reports
 * them all at once); a message names the variable, never its value, which may carry a password.
 */
export function loadEgressProxy (env: Env, problems: string[]): EgressProxy {
  return Object.freeze({
    httpsProxy: proxyFrom(first(env, NAMES.https), problems),
    httpProxy: proxyFrom(first(env, NAMES.http), problems),
    noProxy: first(env, NAMES.no)?.value ?? ''
  })
}

function proxyFrom (found: { name: string, value: string } | undefined, problems: string[]): EgressProxyUrl | undefined {
  if (found === undefined) return undefined
  const url = parseProxyUrl(found.value)
  if (url === undefined) {
    problems.push(`${found.name}: must be http://[user:password@]host[:port] or https://… (the value is not shown: it may hold a password)`)
    return undefined
  }
  const user = userInfo(url)
  if (user === undefined) {
    problems.push(`${found.name}: ${BAD_ESCAPE}`)
    return undefined
  }
  return Object.freeze({ href: url.href, display: proxyDisplayUrl(url), from: found.name, authorization: basicCredentials(user) })
}

/** The Basic credentials of an egress proxy's user and password (RFC 9110 §11.7.1), or undefined when it has neither. */
export function basicCredentials ({ username, password }: { username: string, password: string }): string | undefined {
  if (username === '' && password === '') return undefined
  return `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`
}

/**
 * An egress proxy URL; without a scheme, http:// is meant (as curl and Go read it). Only http: and https:
 * proxies (the WHATWG parser refuses either without a host).
 */
export function parseProxyUrl (value: string): URL | undefined {
  let url: URL
  try {
    url = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(value) ? value : `http://${value}`)
  } catch {
    return undefined
  }
  return url.protocol === 'http:' || url.protocol === 'https:' ? url : undefined
}

/** scheme://host:port, the port made explicit: never the user or the password. */
export function proxyDisplayUrl (url: URL): string {
  return `${url.protocol}//${url.hostname}:${url.port === '' ? defaultPort(url.protocol) : url.port}`
}

export const defaultPort = (protocol: string): string => protocol === 'https:' ? '443' : '80'
