// OpenTelemetry tracing's settings: the standard OTEL_* variables (the OpenTelemetry
// specification's "Environment Variable Specification"), read here like every other setting
// and handed to src/tracing/ (loaded only when an endpoint is set). Pure: no I/O.
import type { Env } from './parse-env.js'

export const TRACING_VARIABLES = [
  'OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'OTEL_EXPORTER_OTLP_PROTOCOL',
  'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_TIMEOUT', 'OTEL_SERVICE_NAME', 'OTEL_RESOURCE_ATTRIBUTES',
  'OTEL_TRACES_SAMPLER', 'OTEL_TRACES_SAMPLER_ARG', 'OTEL_PROPAGATORS', 'OTEL_BSP_SCHEDULE_DELAY',
  'OTEL_BSP_MAX_QUEUE_SIZE', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 'OTEL_SDK_DISABLED', 'OTEL_PROPAGATE_UPSTREAM'
] as const

export type Sampler = 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio'
const SAMPLERS: readonly Sampler[] = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio']
export type Propagator = 'tracecontext' | 'baggage'

export interface TracingConfig {
  /** Where spans go: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as is, or OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces. */
  readonly url: string
  readonly protocol: 'http/protobuf' | 'http/json'
  readonly timeoutMs: number
  readonly serviceName: string
  readonly resourceAttributes: Readonly<Record<string, string>>
  readonly sampler: Sampler
  /** The ratio of the traceidratio samplers, 0 to 1. */
  readonly samplerRatio: number
  /** Which headers carry the caller's context in, and TI's out (none: a new trace per request, nothing sent). */
  readonly propagators: readonly Propagator[]
  readonly scheduleDelayMs: number
  readonly maxQueueSize: number
  readonly maxExportBatchSize: number
  /** OTEL_PROPAGATE_UPSTREAM=false: TI never receives a traceparent (the caller's is dropped too). */
  readonly propagateUpstream: boolean
}

/** The specification's defaults. */
export const TRACING_DEFAULTS = Object.freeze({ timeoutMs: 10_000, scheduleDelayMs: 5_000, maxQueueSize: 2_048, maxExportBatchSize: 512 })

/** A non-negative integer setting, or a problem. */
function integer (env: Env, name: string, fallback: number, problems: string[], min = 0): number {
  const raw = env[name]
  if (raw === undefined || raw.trim() === '') return fallback
  const value = Number(raw)
  if (!Number.isSafeInteger(value) || value < min) {
    problems.push(`${name}: must be an integer of at least ${min}`)
    return fallback
  }
  return value
}

/** `key1=value1,key2=value2` (percent-encoded values, W3C Baggage's syntax). */
export function parseResourceAttributes (text: string, problems: string[]): Record<string, string> {
  const out: Record<string, string> = {}
  for (const pair of text.split(',')) {
    if (pair.trim() === '') continue
    const at = pair.indexOf('=')
    const key = pair.slice(0, at).trim()
    if (at <= 0 || key === '') {
      problems.push('OTEL_RESOURCE_ATTRIBUTES: each entry must be key=value, separated by commas')
      continue
    }
    try {
      out[key] = decodeURIComponent(pair.slice(at + 1).trim())
    } catch {
      problems.push(`OTEL_RESOURCE_ATTRIBUTES: the value of ${key} is not valid percent-encoding`)
    }
  }
  return out
}

/** Where OTLP/HTTP traces go, or undefined (no endpoint: tracing off). */
function traceUrl (env: Env, problems: string[]): string | undefined {
  const own = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim()
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim()
  // The signal's own endpoint is used as is; the base one gets the signal's path (spec: OTLP Exporter).
  const url = own !== undefined && own !== '' ? own : base !== undefined && base !== '' ? `${base.replace(/\/+$/, '')}/v1/traces` : undefined
  if (url === undefined) return undefined
  try {
    const parsed = new URL(url)
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new Error('not http')
  } catch {
    problems.push(`${own !== undefined && own !== '' ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT'}: must be an http:// or https:// URL`)
    return undefined
  }
  return url
}

/** The OTEL_* settings; undefined when tracing is off (no endpoint, or OTEL_SDK_DISABLED=true). */
export function loadTracing (env: Env, problems: string[]): TracingConfig | undefined {
  const before = problems.length
  const disabled = env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true'
  const url = traceUrl(env, problems)
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf').trim()
  if (protocol !== 'http/protobuf' && protocol !== 'http/json') {
    problems.push(`OTEL_EXPORTER_OTLP_PROTOCOL: "${protocol}" is not supported: http/protobuf (the default) or http/json`)
  }
  const sampler = (env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on').trim() as Sampler
  if (!SAMPLERS.includes(sampler)) problems.push(`OTEL_TRACES_SAMPLER: one of ${SAMPLERS.join(', ')}`)
  const ratioText = env.OTEL_TRACES_SAMPLER_ARG?.trim() ?? ''
  const samplerRatio = ratioText === '' ? 1 : Number(ratioText)
  if (!(samplerRatio >= 0 && samplerRatio <= 1)) problems.push('OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1')
  const names = (env.OTEL_PROPAGATORS ?? 'tracecontext,baggage').split(',').map((p) => p.trim()).filter((p) => p !== '')
  const unknown = names.filter((p) => p !== 'tracecontext' && p !== 'baggage' && p !== 'none')
  if (unknown.length > 0) problems.push(`OTEL_PROPAGATORS: ${unknown.join(', ')} not supported: tracecontext, baggage or none`)
  const upstream = (env.OTEL_PROPAGATE_UPSTREAM ?? 'true').trim().toLowerCase()
  if (upstream !== 'true' && upstream !== 'false') problems.push('OTEL_PROPAGATE_UPSTREAM: true or false')
  const config: TracingConfig = {
    url: url ?? '',
    protocol: protocol === 'http/json' ? 'http/json' : 'http/protobuf',
    timeoutMs: integer(env, 'OTEL_EXPORTER_OTLP_TIMEOUT', TRACING_DEFAULTS.timeoutMs, problems, 1),
    serviceName: env.OTEL_SERVICE_NAME?.trim() ?? '',
    resourceAttributes: parseResourceAttributes(env.OTEL_RESOURCE_ATTRIBUTES ?? '', problems),
    sampler,
    samplerRatio,
    propagators: names.includes('none') ? [] : names.filter((p): p is Propagator => p === 'tracecontext' || p === 'baggage'),
    scheduleDelayMs: integer(env, 'OTEL_BSP_SCHEDULE_DELAY', TRACING_DEFAULTS.scheduleDelayMs, problems),
    maxQueueSize: integer(env, 'OTEL_BSP_MAX_QUEUE_SIZE', TRACING_DEFAULTS.maxQueueSize, problems, 1),
    maxExportBatchSize: integer(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', TRACING_DEFAULTS.maxExportBatchSize, problems, 1),
    propagateUpstream: upstream !== 'false'
  }
  if (disabled || url === undefined || problems.length > before) return undefined
  return Object.freeze(config)
}
