// A read-cache sidecar on Redis, handed to a test only once it is in the state the test means.
import type { Test } from 'tap'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'
import { cacheSidecar, type CacheSidecar, type CacheSidecarOptions, type Ti } from './fixture.js'

/**
 * A sidecar on Redis, once its budgets are shared there and its cache's connection (if it has
 * one) is up: on a busy machine either may take longer than the sidecar's start, and a request
 * before would be refused by a degraded budget, or miss Redis.
 */
export async function fleetSidecar (t: Test, ti: Ti, env: Record<string, string>, options: CacheSidecarOptions): Promise<CacheSidecar> {
  const s = await cacheSidecar(t, ti, env, options)
  await eventually(t, 'budgets shared and the cache connected', async () => {
    if ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_rate_limit_degraded', {})) !== 0) return false
    const shared = ((await s.status()).cache as { shared: { up: boolean } | null } | undefined)?.shared
    return shared === null || shared?.up === true
  }, 30_000)
  return s
}
