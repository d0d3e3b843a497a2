// What a valid configuration may still do that its operator should hear about. Not refused:
// a stand-in or a test double on another host is plain HTTP (docker-compose's demo is). Said
// at start (a warning in the log) and by check-config (on stderr).
import { isLoopback } from '../egress/route.js'

export { cachedWaitWarnings } from '../cache/timing.js'
export { cacheBoundWarnings } from '../cache/memory-bound.js'

/**
 * A plain http:// AUTH_URL or UPSTREAM_URL off this machine: the client secret (in every token
 * request's body) or the access token (in every request's Authorization) would cross the
 * network unencrypted.
 */
export function plainHttpWarnings (urls: { readonly token: { readonly authUrl: string }, readonly upstream: { readonly url: string } }): string[] {
  const warnings: string[] = []
  const check = (name: string, value: string, carried: string): void => {
    const url = new URL(value)
    if (url.protocol !== 'http:' || isLoopback(url.hostname)) return
    warnings.push(`${name} is plain http:// to ${url.host}, which is not this machine: ${carried} would cross the network unencrypted; use https://`)
  }
  check('AUTH_URL', urls.token.authUrl, 'the client secret')
  check('UPSTREAM_URL', urls.upstream.url, 'the access token')
  return warnings
}
