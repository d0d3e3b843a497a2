import { Counter, METRIC_PREFIX, type Registry } from './prom.js'

/** OpenTelemetry tracing (src/tracing/): spans exported, and dropped rather than let a request wait. */
export function traceMetrics (registry: Registry) {
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
