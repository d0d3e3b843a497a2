import { Counter, Gauge, METRIC_PREFIX, type Registry } from './prom.js'

/** The overload manager (src/overload/manager.ts): whether it sheds, what it shed and why, live memory against the limit. */
export function overloadMetrics (registry: Registry) {
  let live = (): number => 0
  let privateMemory = (): number | undefined => undefined
  const overloadShed = new Counter({
    name: `${METRIC_PREFIX}overload_shed_total`,
    help: 'New requests answered 503 OVERLOADED before anything was read or sent, by reason (memory: live memory and the bodies in flight over the high water, or the cgroup\'s usage over its water, or private memory with what is in flight too near the limit for one more; in_flight: MAX_IN_FLIGHT_REQUESTS reached; connections: a new connection beyond MAX_CONNECTIONS, answered before its request was read, then closed; memory_connections: an open connection with an unfinished head answered and closed, oldest first, on private memory; heads: the same, beyond the bound on unfinished heads).',
    labelNames: ['reason'] as const,
    registers: [registry]
  })
  // Every reason exported from the start, so that an alert's increase() sees the first shed.
  for (const reason of ['memory', 'in_flight', 'connections', 'memory_connections', 'heads']) overloadShed.inc({ reason }, 0)
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
    unfollowedConnections: new Counter({
      name: `${METRIC_PREFIX}overload_unfollowed_connections_total`,
      help: 'Proxy connections whose unfinished heads could not be followed (Node\'s HTTP parser not the one expected, src/upstream/socket-internals.ts): neither bounded in number nor closed on memory; MAX_CONNECTIONS and admission still hold.',
      registers: [registry]
    }),
    idleCollections: new Counter({
      name: `${METRIC_PREFIX}idle_collections_total`,
      help: 'Memory-reducing garbage collections run while the sidecar was quiet: one after start-up, then one after each burst that grew the heap (src/overload/idle-memory.ts).',
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
