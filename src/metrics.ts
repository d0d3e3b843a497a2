// Every metric the sidecar exports, in one registry: each concern's metrics are declared in
// its part under src/metrics/, and registered here in one fixed order (the order of a scrape).
import { buildInfo as currentBuildInfo, type BuildInfo } from './config/build-info.js'
import { cacheMetrics } from './metrics/cache.js'
import { exchangeMetrics } from './metrics/exchange.js'
import { orderMetrics } from './metrics/orders.js'
import { overloadMetrics } from './metrics/overload.js'
import { Gauge, LazyDefaultsRegistry, METRIC_PREFIX, PromRegistry, type Registry } from './metrics/prom.js'
import { budgetMetrics, rateLimitMetrics } from './metrics/quota.js'
import { tokenMetrics } from './metrics/token.js'
import { traceMetrics } from './metrics/tracing.js'

export { METRIC_PREFIX } from './metrics/prom.js'
export { methodLabel, statusClass, type Outcome } from './metrics/exchange.js'

export interface MetricsOptions {
  defaultMetrics?: boolean
  buildInfo?: BuildInfo
  /** RATE_LIMIT_REDIS_URL is set: store_auth_proxy_rate_limit_redis_up is exported. */
  rateLimitRedis?: boolean
}

export function createMetrics ({ defaultMetrics = true, buildInfo = currentBuildInfo(), rateLimitRedis = false }: MetricsOptions = {}) {
  const registry = defaultMetrics ? new LazyDefaultsRegistry() : new PromRegistry()
  const metrics = {
    registry,
    ...tokenMetrics(registry),
    ...exchangeMetrics(registry),
    ...rateLimitMetrics(registry, rateLimitRedis),
    ...cacheMetrics(registry),
    ...overloadMetrics(registry),
    ...budgetMetrics(registry),
    ...traceMetrics(registry),
    ...orderMetrics(registry)
  }
  buildInfoMetric(registry, buildInfo)
  return metrics
}

function buildInfoMetric (registry: Registry, buildInfo: BuildInfo): void {
  // The conventional info metric: always 1, the build in its labels (src/config/build-info.ts).
  const build = new Gauge({
    name: `${METRIC_PREFIX}build_info`,
    help: 'Always 1; the labels say which build runs: version, source revision, Node.js version.',
    labelNames: ['version', 'revision', 'node'] as const,
    registers: [registry]
  })
  build.set({ version: buildInfo.version, revision: buildInfo.revision, node: buildInfo.node }, 1)
}

export type Metrics = ReturnType<typeof createMetrics>
