// The OpenTelemetry SDK as the sidecar runs it, from the OTEL_* settings
// (src/config/tracing.ts): a tracer provider with the configured sampler and resource, an OTLP
// exporter (protobuf or JSON over HTTP) behind a bounded queue, and the propagators. Loaded by
// app.ts with a dynamic import() only when an endpoint is set: with tracing off, no
// @opentelemetry module is loaded (test/tracing/loaded-modules.test.ts).
import type { TextMapPropagator } from '@opentelemetry/api'
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base'
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http'
import { JsonTraceSerializer, TraceExporterMetricsHelper } from '@opentelemetry/otlp-transformer'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, TraceIdRatioBasedSampler, TracerProvider, type ReadableSpan, type Sampler, type SpanExporter
} from '@opentelemetry/sdk-trace'
import type { TracingConfig } from '../config/tracing.js'
import type { Metrics } from '../metrics.js'
import { createQueueProcessor } from './processor.js'

/** How long a shutdown waits for the last spans to reach the collector. */
export const SHUTDOWN_FLUSH_MS = 2_000

function samplerFor (config: TracingConfig): Sampler {
  const ratio = new TraceIdRatioBasedSampler(config.samplerRatio)
  switch (config.sampler) {
    case 'always_on': return new AlwaysOnSampler()
    case 'always_off': return new AlwaysOffSampler()
    case 'traceidratio': return ratio
    case 'parentbased_always_off': return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio': return new ParentBasedSampler({ root: ratio })
    default: return new ParentBasedSampler({ root: new AlwaysOnSampler() })
  }
}

/** OTLP over HTTP: protobuf (the SDK's exporter), or JSON (the same parts, JSON's serializer). */
function exporterFor (config: TracingConfig): SpanExporter {
  const options = { url: config.url, timeoutMillis: config.timeoutMs }
  if (config.protocol === 'http/protobuf') return new OTLPTraceExporter(options)
  return new OTLPExporterBase<ReadableSpan[]>(createOtlpHttpExportDelegate(
    convertLegacyHttpOptions(options, 'TRACES', 'v1/traces', { 'Content-Type': 'application/json' }),
    JsonTraceSerializer, 'otlp_http_json_span_exporter', TraceExporterMetricsHelper, undefined))
}

export interface TracingSdk {
  provider: TracerProvider
  propagator: TextMapPropagator
  /** Exports what is queued (for at most SHUTDOWN_FLUSH_MS) and stops. Never fails. */
  shutdown: () => Promise<void>
}

export function startSdk (config: TracingConfig, { metrics, version }: { metrics: Metrics, version: string }): TracingSdk {
  const processor = createQueueProcessor(exporterFor(config), {
    scheduleDelayMs: config.scheduleDelayMs,
    maxQueueSize: config.maxQueueSize,
    maxExportBatchSize: config.maxExportBatchSize,
    dropped: (reason, count) => { metrics.traceSpansDropped.inc({ reason }, count) },
    exported: (count) => { metrics.traceSpansExported.inc(count) }
  })
  const provider = new TracerProvider({
    // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES (the SDK specification).
    resource: resourceFromAttributes({
      'service.name': 'store-auth-proxy',
      'service.version': version,
      ...config.resourceAttributes,
      ...(config.serviceName === '' ? {} : { 'service.name': config.serviceName })
    }),
    sampler: samplerFor(config),
    spanProcessors: [processor]
  })
  const propagators = config.propagators.map((p) => p === 'baggage' ? new W3CBaggagePropagator() : new W3CTraceContextPropagator())
  return {
    provider,
    propagator: new CompositePropagator({ propagators }),
    async shutdown () {
      let timer: NodeJS.Timeout | undefined
      const late = new Promise<void>((resolve) => { timer = setTimeout(resolve, SHUTDOWN_FLUSH_MS).unref() })
      await Promise.race([provider.shutdown().catch(() => {}), late])
      clearTimeout(timer)
    }
  }
}
