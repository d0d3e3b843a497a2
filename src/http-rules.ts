// What may cross the proxy, as pure functions: which request targets are
// accepted, and which headers are forwarded in each direction.

type Headers = Record<string, string | string[] | number | undefined>

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1): they describe one connection, never the
 * message, so a proxy must not forward them. `expect` joins them because the
 * sidecar answers `100-continue` itself (RFC 9110 §10.1.1), and the two
 * `proxy-*` credentials headers are meant for a proxy, never for the upstream.
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
 * Headers sent upstream: the caller's own Authorization never passes through;
 * the sidecar's token replaces it. Mutates and returns the (already copied) object.
 */
export function upstreamRequestHeaders<H extends Headers> (headers: H, authorization: string): H {
  dropHopByHop(headers)
  ;(headers as Headers).authorization = authorization
  return headers
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
 * percent-encoded, or with backslashes, which URL parsers treat as `/`) would
 * climb above UPSTREAM_URL's base path.
 */
export function requestTargetProblem (url: string): string | undefined {
  if (url.charCodeAt(0) !== 47 /* / */) return 'only origin-form request targets are accepted'
  const queryAt = url.indexOf('?')
  const path = queryAt === -1 ? url : url.slice(0, queryAt)
  if (path.startsWith('//')) return 'the request path must not start with //'
  if (path.includes('\\')) return 'the request path must not contain a backslash'
  // Fast path: nothing that could decode into a dot-segment or a backslash.
  if (!path.includes('.') && !path.includes('%')) return undefined
  let decoded: string
  try {
    decoded = decodeURIComponent(path)
  } catch {
    return 'the request path has invalid percent-encoding'
  }
  if (decoded.includes('\\')) return 'the request path must not contain a backslash'
  for (const segment of decoded.split('/')) {
    if (segment === '.' || segment === '..') return 'the request path must not contain dot-segments'
  }
  return undefined
}
