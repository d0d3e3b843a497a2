// What may cross the sidecar, as pure functions: which request targets are
// accepted, and which headers are forwarded in each direction.

type Headers = Record<string, string | string[] | number | undefined>

/** The REST methods forwarded; TRACE is refused because the upstream would echo the injected token back. */
export const FORWARDED_METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'] as const

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection, never the
 * message, so an intermediary must not forward them. `expect` joins them because the
 * sidecar answers `100-continue` itself (RFC 9110 §10.1.1), and the two
 * `proxy-*` credentials headers are meant for an HTTP proxy, never for the upstream.
 */
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'proxy-authorization', 'proxy-authenticate', 'expect'
])

/** Header names listed in a Connection header (RFC 9110 §7.6.1), lower-cased. */
export function connectionOptions (value: Headers[string]): string[] {
  if (value === undefined) return []
  const joined = Array.isArray(value) ? value.join(',') : String(value)
  return joined.split(',').map((name) => name.trim().toLowerCase()).filter((name) => name !== '')
}

function dropHopByHop (headers: Headers): void {
  for (const name of connectionOptions(headers.connection)) delete headers[name]
  for (const name of Object.keys(headers)) {
    if (HOP_BY_HOP.has(name)) delete headers[name]
  }
}

/**
 * The header list sent upstream, built from the caller's raw list: same order,
 * same spelling, repeated fields kept as they came (Node's parsed object would
 * drop or join them). Left out: hop-by-hop fields and those named in
 * `Connection`, the caller's `Host` (the upstream's own is sent) and
 * `Authorization` (the sidecar's token replaces it), and `Content-Length` when
 * no body is forwarded.
 */
export function upstreamRequestHeaders (
  rawHeaders: readonly string[], connection: Headers[string], host: string, authorization: string, withBody: boolean
): string[] {
  const named = connection === undefined ? undefined : new Set(connectionOptions(connection))
  const out = ['host', host, 'authorization', authorization]
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    const lower = name.toLowerCase()
    if (HOP_BY_HOP.has(lower) || lower === 'host' || lower === 'authorization' || named?.has(lower) === true) continue
    if (!withBody && lower === 'content-length') continue
    out.push(name, rawHeaders[i + 1] as string)
  }
  return out
}

/**
 * Why a request's header list must not be forwarded, or undefined. Node keeps the
 * first of repeated `Host` fields; RFC 9112 §3.2 says to answer 400 instead, since
 * the two may be read differently along the way.
 */
export function requestHeadersProblem (rawHeaders: readonly string[]): string | undefined {
  let hosts = 0
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i] as string
    if (name.length === 4 && name.toLowerCase() === 'host' && ++hosts > 1) return 'the request has more than one Host header'
  }
  return undefined
}

/** Headers sent back to the caller: everything end-to-end, untouched. */
export function callerResponseHeaders<H extends Headers> (headers: H): H {
  dropHopByHop(headers)
  return headers
}

/**
 * Why a request target must not be forwarded, or undefined when it may be.
 * Only origin-form (`/path?query`) reaches the upstream: an absolute-form target
 * or `//host` would make the sidecar an open proxy, and a dot-segment (also
 * percent-encoded, with `;parameters`, or with backslashes, which URL parsers treat as `/`) would
 * climb above UPSTREAM_URL's base path.
 */
export function requestTargetProblem (url: string): string | undefined {
  if (url.charCodeAt(0) !== 47 /* / */) return 'only origin-form request targets are accepted'
  // A fragment is never part of a request target (RFC 9112 §3.2.1: origin-form is
  // absolute-path [ "?" query ]): servers disagree on what `/x#y` names, and the quota
  // guard must count what the upstream serves.
  if (url.includes('#')) return 'the request target must not contain # (a fragment is never sent)'
  const queryAt = url.indexOf('?')
  const path = queryAt === -1 ? url : url.slice(0, queryAt)
  if (path.startsWith('//')) return 'the request path must not start with //'
  if (path.includes('\\')) return 'the request path must not contain a backslash'
  // Fast path: nothing that could decode into a dot-segment or a backslash.
  if (!path.includes('.') && !path.includes('%')) return undefined
  // Only `.`, `/` and `\` matter here, so only their escapes are decoded: any other
  // percent-encoded byte is legal (RFC 3986 §2.1), UTF-8 or not (`/files/%FF`).
  if (/%(?![0-9A-Fa-f]{2})/.test(path)) return 'the request path has invalid percent-encoding'
  // Overlong UTF-8 forms (`%C0%AE` for `.`) are never valid, and some servers decode them anyway.
  if (/%[cC][01]|%[eE]0%[89]|%[fF]0%8/.test(path)) return 'the request path has an overlong UTF-8 encoding'
  const decoded = path.replace(/%(2[eEfF]|5[cC])/g, (escape) => String.fromCharCode(parseInt(escape.slice(1), 16)))
  if (decoded.includes('\\')) return 'the request path must not contain a backslash'
  for (const segment of decoded.split('/')) {
    // `..;x` too: servers that drop path parameters before resolving dot-segments (Tomcat,
    // Spring, Jetty) read `/a/..;/b` as `/b`, and the rules' matcher drops them as well.
    const name = segment.split(';', 1)[0]
    if (name === '.' || name === '..') return 'the request path must not contain dot-segments'
  }
  return undefined
}
