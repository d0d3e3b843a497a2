// Test-order mode (TEST_ORDERS): `POST /v2/store/orders` goes to TI's `/v2/store/orders/test`,
// so a staging stack runs unchanged application code without placing real orders. A wrapper
// around the exchange: the rules, budgets and keys still see the caller's path.
import { matchSegments } from '../config/rate-limit-rules.js'
import type { Upstream } from '../upstream/forward.js'

const ORDERS = ['v2', 'store', 'orders']

/** The path TI gets for `method` and `path` (base path included): the test endpoint for an order. */
export function testOrderPath (method: string, path: string, basePath: string): string {
  if (method !== 'POST' || !path.startsWith(basePath)) return path
  const queryAt = path.indexOf('?')
  const query = queryAt === -1 ? '' : path.slice(queryAt)
  const rest = path.slice(basePath.length, queryAt === -1 ? undefined : queryAt)
  const segments = matchSegments(rest)
  if (segments.length !== ORDERS.length || segments.some((s, i) => s !== ORDERS[i])) return path
  return `${basePath}/v2/store/orders/test${query}`
}

/** The upstream, with orders sent to the test endpoint. */
export function testOrderUpstream (upstream: Upstream, upstreamUrl: string): Upstream {
  // Stryker disable next-line Regex: UPSTREAM_URL is normalised without a trailing slash (src/config/urls.ts)
  const basePath = new URL(upstreamUrl).pathname.replace(/\/$/, '')
  return {
    ...upstream,
    forward: (request, res, hooks) => { upstream.forward({ ...request, path: testOrderPath(request.method, request.path, basePath) }, res, hooks) }
  }
}
