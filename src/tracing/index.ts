// Tracing's one entry point, imported by app.ts only when an OTLP endpoint is set.
import type { TracingConfig } from '../config/tracing.js'
import type { Metrics } from '../metrics.js'
import { createRequestTracing, type RequestTracing } from './request.js'
import { startSdk } from './sdk.js'

export interface Tracing {
  requests: RequestTracing
  shutdown: () => Promise<void>
}

export function startTracing (config: TracingConfig, options: { metrics: Metrics, version: string, upstreamUrl: string, egressRoute: string }): Tracing {
  const sdk = startSdk(config, options)
  const requests = createRequestTracing({
    tracer: sdk.provider.getTracer('store-auth-proxy', options.version),
    propagator: sdk.propagator,
    propagateUpstream: config.propagateUpstream,
    upstreamUrl: options.upstreamUrl,
    egressRoute: options.egressRoute
  })
  return { requests, shutdown: sdk.shutdown }
}
