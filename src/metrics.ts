import { createRequire } from 'node:module'
import type * as PromClient from 'prom-client'
import { FORWARDED_METHODS } from './http/rules.js'
import { buildInfo as currentBuildInfo, type BuildInfo } from './config/build-info.js'

// prom-client's own files, not its index: the index also loads the Pushgateway, the cluster
// aggregator, Summary (with tdigest) and the default collectors (with @opentelemetry/api, for
// exemplars), some 3.6 MiB of private memory and 20 ms of start-up the sidecar does not use
// (docs/performance.md). The objects are the index's own.
const require = createRequire(import.meta.url)
const Counter = require('prom-client/lib/counter') as typeof PromClient.Counter
const Gauge = require('prom-client/lib/gauge') as typeof PromClient.Gauge
const Histogram = require('prom-client/lib/histogram') as typeof PromClient.Histogram
const PromRegistry = require('prom-client/lib/registry') as typeof PromClient.Registry
type Registry = PromClient.Registry

/**
 * A registry that registers prom-client's default collectors (`process_*`, `nodejs_*`, under
 * their standard names, unprefixed, so the usual Node.js dashboards and alerts work as they
 * are) at its first scrape, not at start: each is read at scrape time, so a scrape shows the
 * same series either way, and a sidecar nobody scrapes never loads them (3.3 MiB of private
 * memory, 25 ms of start-up, and an event-loop monitor waking every 10 ms).
 */
class LazyDefaultsRegistry extends PromRegistry {
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

// Every metric the sidecar exports, named in one place. Names follow the
// Prometheus conventions: one prefix, base units (seconds), `_total` counters.
export const METRIC_PREFIX = 'store_auth_proxy_'

const KNOWN_METHODS = new Set<string>(FORWARDED_METHODS)

/** Label values come from a fixed set so a client cannot blow up the series count. */
export function methodLabel (method: string): string {
  return KNOWN_METHODS.has(method) ? method : 'OTHER'
}

const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx']

/** The class of the status line sent, or `none` when the caller got no status line. */
export function statusClass (statusCode: number | undefined): string {
  if (statusCode === undefined) return 'none'
  return STATUS_CLASSES[Math.floor(statusCode / 100) - 1] ?? 'other'
}

/**
 * How an exchange with a caller ended: the answer went out whole, the caller went
 * away first, or the upstream failed mid-answer and the caller's connection was cut.
 */
export type Outcome = 'completed' | 'aborted' | 'truncated'

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

/** The token endpoint: requests by outcome, their duration, and the held token's expiry. */
function tokenMetrics (registry: Registry) {
  const tokenRequests = new Counter({
    name: `${METRIC_PREFIX}token_requests_total`,
    help: 'Requests to the OAuth token endpoint, by outcome.',
    labelNames: ['outcome'] as const,
    registers: [registry]
  })
  const tokenRequestDuration = new Histogram({
    name: `${METRIC_PREFIX}token_request_duration_seconds`,
    help: 'Duration of requests to the OAuth token endpoint.',
    buckets: [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry]
  })
  const tokenExpiry = new Gauge({
    name: `${METRIC_PREFIX}token_expiry_timestamp_seconds`,
    help: 'Unix time at which the current access token expires (0 when none is held).',
    registers: [registry]
  })
  return { tokenRequests, tokenRequestDuration, tokenExpiry }
}

/** Exchanges on the proxy port: by method, status class and outcome; errors; the upstream queue. */
function exchangeMetrics (registry: Registry) {
  const requests = new Counter({
    name: `${METRIC_PREFIX}requests_total`,
    help: 'Proxied requests, by method, class of the status line sent (none if none was) and outcome (completed, aborted, truncated).',
    labelNames: ['method', 'status_class', 'outcome'] as const,
    registers: [registry]
  })
  const requestDuration = new Histogram({
    name: `${METRIC_PREFIX}request_duration_seconds`,
    help: 'Duration of proxied requests, from arrival to the end of the answer, by class of the status line sent (none if none was).',
    labelNames: ['status_class'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry]
  })
  const requestsInFlight = new Gauge({
    name: `${METRIC_PREFIX}requests_in_flight`,
    help: 'Proxied requests currently being handled.',
    registers: [registry]
  })

  const errors = new Counter({
    name: `${METRIC_PREFIX}errors_total`,
    help: 'Answers the sidecar made itself on the proxy port, by error code.',
    labelNames: ['code'] as const,
    registers: [registry]
  })
  const upstreamQueued = new Gauge({
    name: `${METRIC_PREFIX}upstream_queued_requests`,
    help: 'Requests waiting for a connection to the upstream.',
    registers: [registry]
  })

  // The per-request path: label children looked up once per label set, not hashed per call.
  const requestChildren = new Map<string, { inc: () => void }>()
  const durationChildren = new Map<string, { observe: (seconds: number) => void }>()
  /** Counts one finished exchange on the proxy port (labels: see requests and requestDuration). */
  function recordExchange (method: string, statusClassLabel: string, outcome: Outcome, seconds: number): void {
    const key = `${method} ${statusClassLabel} ${outcome}`
    let count = requestChildren.get(key)
    if (count === undefined) {
      count = requests.labels(method, statusClassLabel, outcome)
      requestChildren.set(key, count)
    }
    count.inc()
    let duration = durationChildren.get(statusClassLabel)
    if (duration === undefined) {
      duration = requestDuration.labels(statusClassLabel)
      durationChildren.set(statusClassLabel, duration)
    }
    duration.observe(seconds)
  }

  return { requests, requestDuration, requestsInFlight, errors, upstreamQueued, recordExchange }
}

/** The quota guard's metrics, every one named rate_limit*. */
function rateLimitMetrics (registry: Registry, rateLimitRedis: boolean) {
  // The quota guard (src/quota/): local refusals and delays, the gateway's own rate-limit
  // answers, cool-downs, and where budgets live.
  const rateLimited = new Counter({
    name: `${METRIC_PREFIX}rate_limited_total`,
    help: 'Requests the quota guard refused (local 429) or delayed, by rule (upstream for none), reason (budget, cooldown, degraded: Redis cannot be asked and this sidecar\'s share is spent) and action (refused, delayed).',
    labelNames: ['rule', 'reason', 'action'] as const,
    registers: [registry]
  })
  const rateLimitUpstreamAnswers = new Counter({
    name: `${METRIC_PREFIX}rate_limit_upstream_answers_total`,
    help: 'Rate-limit answers from the gateway (429, or 500 with a policies.ratelimit.* error code), by rule (upstream for none).',
    labelNames: ['rule'] as const,
    registers: [registry]
  })
  const rateLimitCooldownUntil = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_cooldown_until_seconds`,
    help: 'Unix time at which the cool-down of a rule (upstream for none) ends; 0 when none.',
    labelNames: ['rule'] as const,
    registers: [registry]
  })
  const rateLimitBackend = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_backend`,
    help: 'Where budgets and cool-downs live: 1 for the backend in use (memory, redis), 0 for the other.',
    labelNames: ['backend'] as const,
    registers: [registry]
  })
  rateLimitBackend.set({ backend: 'memory' }, 1)
  rateLimitBackend.set({ backend: 'redis' }, 0)
  const rateLimitRedisUp = rateLimitRedis
    ? new Gauge({
      name: `${METRIC_PREFIX}rate_limit_redis_up`,
      help: '1 when the rate-limit Redis answers and budgets are shared, 0 when they are not (then each sidecar spends only its share).',
      registers: [registry]
    })
    : undefined
  rateLimitRedisUp?.set(0)
  const rateLimitRedisFallbacks = new Counter({
    name: `${METRIC_PREFIX}rate_limit_redis_fallbacks_total`,
    help: 'Switches of the quota guard from shared budgets in Redis to degraded mode (Redis unreachable, too slow or refusing).',
    registers: [registry]
  })
  // Degraded mode and the fleet (only with RATE_LIMIT_REDIS_URL): docs/quota-guard.md.
  const fleetGauge = (name: string, help: string): PromClient.Gauge | undefined => rateLimitRedis
    ? new Gauge({ name: `${METRIC_PREFIX}${name}`, help, registers: [registry] })
    : undefined
  const rateLimitDegraded = fleetGauge('rate_limit_degraded',
    '1 while budgets cannot be shared through Redis and this sidecar spends only its share (limit / fleet size), 0 when shared.')
  rateLimitDegraded?.set(1)
  const rateLimitFleetSize = fleetGauge('rate_limit_fleet_size',
    'The fleet size shares are computed with: RATE_LIMIT_FLEET_SIZE, or the sidecars present in Redis if more; 0: unknown.')
  const rateLimitFleetPresent = fleetGauge('rate_limit_fleet_present', 'Sidecars on this credential present in Redis at the last contact.')
  const rateLimitRedisEvicting = fleetGauge('rate_limit_redis_evicting',
    '1 when the rate-limit Redis may evict keys (maxmemory set, a policy other than noeviction), 0 when not, -1 when it does not tell.')
  const rateLimitFleetDeclared = fleetGauge('rate_limit_fleet_declared',
    'RATE_LIMIT_FLEET_SIZE (0: unset); fewer than rate_limit_fleet_present breaks the guarantee while cut off from Redis.')
  const rateLimitRedisDataLost = rateLimitRedis
    ? new Counter({
      name: `${METRIC_PREFIX}rate_limit_redis_data_lost_total`,
      help: 'Times Redis was found to have lost the fleet\'s tally (restarted empty): every budget is refused for one window of its limits.',
      registers: [registry]
    })
    : undefined

  return {
    rateLimited,
    rateLimitUpstreamAnswers,
    rateLimitCooldownUntil,
    rateLimitBackend,
    rateLimitRedisUp,
    rateLimitRedisFallbacks,
    rateLimitDegraded,
    rateLimitFleetSize,
    rateLimitFleetPresent,
    rateLimitFleetDeclared,
    rateLimitRedisEvicting,
    rateLimitRedisDataLost
  }
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

/** The read cache (src/cache/): answers by how they were served, stores, evictions, bytes held, here and in Redis. */
function cacheMetrics (registry: Registry) {
  const counter = (name: string, help: string, labelNames: string[]) => new Counter({ name: `${METRIC_PREFIX}${name}`, help, labelNames, registers: [registry] })
  let held = (): number => 0
  return {
    cacheRequests: counter('cache_requests_total',
      'Requests of rules with cache=, by how they were answered: hit (fresh), coalesced (another request\'s fetch), stale (TI could not be asked), miss (fetched or refused).',
      ['rule', 'result']),
    cacheStores: counter('cache_stores_total', 'Answers of TI stored by the read cache.', ['rule']),
    cacheNotStored: counter('cache_not_stored_total', 'Answers of TI to cached rules that were not stored, by reason (status, no-store, private, too-large, ...).', ['rule', 'reason']),
    cacheEvictions: counter('cache_evictions_total', 'Stored answers evicted to keep the cache within CACHE_MAX_BYTES.', ['rule']),
    cacheRedisErrors: counter('cache_redis_errors_total', 'Read-cache lookups or stores in Redis that failed (the sidecar used its own copies).', []),
    cacheRedisMalformed: counter('cache_redis_malformed_total',
      'Values in Redis under a read-cache key that were not a complete entry of this version (another version\'s, or damaged): each was a miss.', []),
    cacheRedisEvictedBytes: counter('cache_redis_evicted_bytes_total',
      'Bytes of the fleet\'s stored answers the read cache evicted from Redis to stay within CACHE_REDIS_MAX_BYTES (the cache\'s own entries only).', []),
    cacheRedisBytes: new Gauge({
      name: `${METRIC_PREFIX}cache_redis_bytes`,
      help: 'Bytes of the fleet\'s stored answers in Redis (at most CACHE_REDIS_MAX_BYTES), as this sidecar\'s last store or invalidation found them.',
      registers: [registry]
    }),
    cacheInvalidations: counter('cache_invalidations_total',
      'Stored answers dropped because a PUT, POST, DELETE or other unsafe request to their URI succeeded (RFC 9111 §4.4), by where they were: this sidecar\'s memory, or Redis.', ['where']),
    cacheBytes: new Gauge({
      name: `${METRIC_PREFIX}cache_bytes`,
      help: 'Bytes of stored answers this sidecar holds in memory (at most CACHE_MAX_BYTES).',
      registers: [registry],
      collect () { this.set(held()) }
    }),
    /** Where cache_bytes is read from. */
    measureCache (fn: () => number): void { held = fn }
  }
}

/** The overload manager (src/overload/manager.ts): whether it sheds, what it shed and why, live memory against the limit. */
function overloadMetrics (registry: Registry) {
  let live = (): number => 0
  let privateMemory = (): number | undefined => undefined
  const overloadShed = new Counter({
    name: `${METRIC_PREFIX}overload_shed_total`,
    help: 'New requests answered 503 OVERLOADED before anything was read or sent, by reason (memory: live memory and the bodies in flight over the high water, or the cgroup\'s usage over its water, or private memory with what is in flight too near the limit for one more; in_flight: MAX_IN_FLIGHT_REQUESTS reached; connections: a new connection beyond MAX_CONNECTIONS, answered before its request was read, then closed).',
    labelNames: ['reason'] as const,
    registers: [registry]
  })
  // Every reason exported from the start, so that an alert's increase() sees the first shed.
  for (const reason of ['memory', 'in_flight', 'connections']) overloadShed.inc({ reason }, 0)
  return {
    overloadShed,
    overloadShedding: new Gauge({
      name: `${METRIC_PREFIX}overload_shedding`,
      help: '1 while new requests get 503 OVERLOADED on memory (live memory and the bodies in flight over the high water of the limit, or the cgroup\'s usage over its water, until live memory is below the low water; or private memory with what is in flight too near the limit for new requests, until a sample finds it 5 % of the limit lower or none was shed on it for 5 s), 0 otherwise.',
      registers: [registry]
    }),
    memoryLiveBytes: new Gauge({
      name: `${METRIC_PREFIX}memory_live_bytes`,
      help: 'Live memory as the overload manager last sampled it: V8 heap in use plus memory held by JS objects outside it (Buffers), not RSS.',
      registers: [registry],
      collect () { this.set(live()) }
    }),
    memoryLimitBytes: new Gauge({
      name: `${METRIC_PREFIX}memory_limit_bytes`,
      help: 'The memory limit the overload manager sheds before: MEMORY_LIMIT_BYTES, or the cgroup\'s; 0 when none is known.',
      registers: [registry]
    }),
    memoryPrivateBytes: new Gauge({
      name: `${METRIC_PREFIX}memory_private_bytes`,
      help: 'The process\'s private memory (RssAnon: resident anonymous pages, what an OOM kill is made of) as the overload manager last sampled it (read at each scrape where no memory limit is known); 0 where unknown (not Linux).',
      registers: [registry],
      collect () { this.set(privateMemory() ?? 0) }
    }),
    /** Where memory_live_bytes is read from. */
    measureLiveMemory (fn: () => number): void { live = fn },
    /** Where memory_private_bytes is read from. */
    measurePrivateMemory (fn: () => number | undefined): void { privateMemory = fn }
  }
}

/** Idempotent routes (src/idempotency/) and the route policy (src/policy/). */
function orderMetrics (registry: Registry) {
  let heldUnknown = (): number => 0
  return {
    idempotencyRequests: new Counter({
      name: `${METRIC_PREFIX}idempotency_requests_total`,
      help: 'Requests of rules with idempotency=, by rule and result: sent (the key taken), replayed (TI\'s stored answer), in_flight (409), unknown (409 ORDER_OUTCOME_UNKNOWN), mismatch (422), missing or invalid (400), unavailable (503).',
      labelNames: ['rule', 'result'] as const,
      registers: [registry]
    }),
    idempotencyOutcomesUnknown: new Counter({
      name: `${METRIC_PREFIX}idempotency_outcomes_unknown_total`,
      help: 'Keyed requests written to TI that got no complete answer (timeout, cut, shutdown): their keys are held as unknown and never sent again.',
      labelNames: ['rule'] as const,
      registers: [registry]
    }),
    idempotencyKeysUnknown: new Gauge({
      name: `${METRIC_PREFIX}idempotency_keys_unknown`,
      help: 'Keys held as outcome unknown that this sidecar knows of (its own, and its state directory\'s), until they expire or an operator releases them.',
      registers: [registry],
      collect () { this.set(heldUnknown()) }
    }),
    idempotencyReleases: new Counter({
      name: `${METRIC_PREFIX}idempotency_releases_total`,
      help: 'Keys an operator released through the admin route POST /idempotency/release.',
      registers: [registry]
    }),
    policyRefused: new Counter({
      name: `${METRIC_PREFIX}policy_refused_total`,
      help: 'Requests refused 403 ROUTE_NOT_ALLOWED by the route policy (ALLOWED_ROUTES), by method.',
      labelNames: ['method'] as const,
      registers: [registry]
    }),
    /** Where idempotency_keys_unknown is read from. */
    measureUnknownKeys (fn: () => number): void { heldUnknown = fn }
  }
}

/**
 * What each limit of each rule may still send, read at each scrape (src/quota/rate-limit-fields.ts):
 * the fleet's remaining while Redis answers, else this sidecar's share's; and each limit's quota.
 */
function budgetMetrics (registry: Registry) {
  let read: () => Promise<void> = async () => {}
  const rateLimitRemaining = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_remaining`,
    help: 'What a limit of a rule may still send now, as RateLimit tells callers: the fleet\'s remaining while Redis answers, else this sidecar\'s share\'s; 0 while cooling down.',
    labelNames: ['rule', 'limit'] as const,
    registers: [registry],
    async collect () { await read() }
  })
  const rateLimitQuota = new Gauge({
    name: `${METRIC_PREFIX}rate_limit_quota`,
    help: 'The quota of a limit of a rule (N of N/WINDOW), for the share of a budget spent.',
    labelNames: ['rule', 'limit'] as const,
    registers: [registry]
  })
  return {
    rateLimitRemaining,
    rateLimitQuota,
    /** What rate_limit_remaining is read from at each scrape. */
    readBudgets (fn: () => Promise<void>): void { read = fn }
  }
}

/** OpenTelemetry tracing (src/tracing/): spans exported, and dropped rather than let a request wait. */
function traceMetrics (registry: Registry) {
  return {
    traceSpansExported: new Counter({
      name: `${METRIC_PREFIX}trace_spans_exported_total`,
      help: 'Spans the OTLP exporter delivered to the collector.',
      registers: [registry]
    }),
    traceSpansDropped: new Counter({
      name: `${METRIC_PREFIX}trace_spans_dropped_total`,
      help: 'Spans dropped, by reason: queue_full (OTEL_BSP_MAX_QUEUE_SIZE spans already wait for the collector) or export_failed (the collector refused, failed or was too slow).',
      labelNames: ['reason'] as const,
      registers: [registry]
    })
  }
}
