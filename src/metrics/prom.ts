// prom-client's parts as every metric file builds with them, and the registry they register in.
import { createRequire } from 'node:module'
import type * as PromClient from 'prom-client'

// prom-client's own files, not its index: the index also loads the Pushgateway, the cluster
// aggregator, Summary (with tdigest) and the default collectors (with @opentelemetry/api, for
// exemplars), some 3.6 MiB of private memory and 20 ms of start-up the sidecar does not use
// (docs/performance.md). The objects are the index's own.
const require = createRequire(import.meta.url)
export const Counter = require('prom-client/lib/counter') as typeof PromClient.Counter
export const Gauge = require('prom-client/lib/gauge') as typeof PromClient.Gauge
export const Histogram = require('prom-client/lib/histogram') as typeof PromClient.Histogram
export const PromRegistry = require('prom-client/lib/registry') as typeof PromClient.Registry
export type Registry = PromClient.Registry

// Every metric the sidecar exports is named under this one prefix, after the Prometheus
// conventions: base units (seconds), `_total` counters.
export const METRIC_PREFIX = 'store_auth_proxy_'

/**
 * A registry that registers prom-client's default collectors (`process_*`, `nodejs_*`, under
 * their standard names, unprefixed, so the usual Node.js dashboards and alerts work as they
 * are) at its first scrape, not at start: each is read at scrape time, so a scrape shows the
 * same series either way, and a sidecar nobody scrapes never loads them (3.3 MiB of private
 * memory, 25 ms of start-up, and an event-loop monitor waking every 10 ms).
 */
export class LazyDefaultsRegistry extends PromRegistry {
  #defaults = false
  override async metrics (): Promise<string> {
    if (!this.#defaults) {
      this.#defaults = true
      const collectDefaultMetrics = require('prom-client/lib/defaultMetrics') as typeof PromClient.collectDefaultMetrics
      collectDefaultMetrics({ register: this })
    }
    return await super.metrics()
  }
}
