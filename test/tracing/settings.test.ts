// The OTEL_* variables as src/config/tracing.ts reads them: off without an endpoint, the
// standard defaults, each value checked and named when wrong.
import t from 'tap'
import { loadTracing, parseResourceAttributes } from '../../src/config/tracing.js'

const load = (env: Record<string, string>): { config: ReturnType<typeof loadTracing>, problems: string[] } => {
  const problems: string[] = []
  return { config: loadTracing(env, problems), problems }
}

t.test('off unless an endpoint is set, or with OTEL_SDK_DISABLED=true', async (t) => {
  t.same(load({}), { config: undefined, problems: [] })
  t.same(load({ OTEL_SERVICE_NAME: 'x', OTEL_TRACES_SAMPLER: 'always_on' }), { config: undefined, problems: [] })
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }).config, undefined)
})

t.test('the endpoints: the base one gets /v1/traces, the traces one is used as is', async (t) => {
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' }).config?.url, 'http://collector:4318/v1/traces')
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b/custom' }).config?.url, 'https://b/custom')
  t.same(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }).problems, ['OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL'])
})

t.test('the defaults of the specification', async (t) => {
  t.same(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).config, {
    url: 'http://c:4318/v1/traces',
    protocol: 'http/protobuf',
    timeoutMs: 10_000,
    serviceName: '',
    resourceAttributes: {},
    sampler: 'parentbased_always_on',
    samplerRatio: 1,
    propagators: ['tracecontext', 'baggage'],
    scheduleDelayMs: 5_000,
    maxQueueSize: 2_048,
    maxExportBatchSize: 512,
    propagateUpstream: true
  })
})

t.test('every value read, and each wrong one named', async (t) => {
  const { config } = load({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'shop',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,team=a%20b',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.25',
    OTEL_PROPAGATORS: 'none',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_PROPAGATE_UPSTREAM: 'false'
  })
  t.match(config, { protocol: 'http/json', serviceName: 'shop', resourceAttributes: { 'deployment.environment': 'prod', team: 'a b' }, sampler: 'parentbased_traceidratio', samplerRatio: 0.25, propagators: [], scheduleDelayMs: 100, propagateUpstream: false })
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).config?.protocol, 'http/json', 'the traces protocol first')
  const wrong = load({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
    OTEL_TRACES_SAMPLER: 'sometimes',
    OTEL_TRACES_SAMPLER_ARG: '2',
    OTEL_PROPAGATORS: 'b3',
    OTEL_BSP_MAX_QUEUE_SIZE: '0',
    OTEL_PROPAGATE_UPSTREAM: 'maybe'
  })
  t.equal(wrong.config, undefined)
  t.same(wrong.problems.map((p) => p.split(':')[0]), [
    'OTEL_EXPORTER_OTLP_PROTOCOL', 'OTEL_TRACES_SAMPLER', 'OTEL_TRACES_SAMPLER_ARG', 'OTEL_PROPAGATORS', 'OTEL_PROPAGATE_UPSTREAM', 'OTEL_BSP_MAX_QUEUE_SIZE'
  ])
  const problems: string[] = []
  t.same(parseResourceAttributes('a=1,,b,c=%zz', problems), { a: '1' })
  t.equal(problems.length, 2, 'an entry without = and a value with bad percent-encoding')
})
