// The OTEL_* settings, case by case: every value trimmed, every default, every bound, and each
// problem naming its variable (test/tracing/settings.test.ts holds the main cases).
import t from 'tap'
import { loadTracing, parseResourceAttributes, TRACING_DEFAULTS } from '../../src/config/tracing.js'

const ON = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }

function load (env: Record<string, string>): { config: ReturnType<typeof loadTracing>, problems: string[] } {
  const problems: string[] = []
  return { config: loadTracing(env, problems), problems }
}

t.test('every value is read trimmed', async (t) => {
  const { config, problems } = load({
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '  http://collector:4318/custom  ',
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: ' http/json ',
    OTEL_SERVICE_NAME: '  shop  ',
    OTEL_TRACES_SAMPLER: ' traceidratio ',
    OTEL_TRACES_SAMPLER_ARG: ' 0.25 ',
    OTEL_PROPAGATORS: ' tracecontext , , baggage ',
    OTEL_PROPAGATE_UPSTREAM: ' FALSE ',
    OTEL_RESOURCE_ATTRIBUTES: ' a = 1 , b=x%20y ,, '
  })
  t.same(problems, [])
  // Each compared whole: t.match takes a string as a pattern, and 'shop' is in '  shop  '.
  t.equal(config?.url, 'http://collector:4318/custom')
  t.equal(config?.protocol, 'http/json')
  t.equal(config?.serviceName, 'shop')
  t.equal(config?.sampler, 'traceidratio')
  t.equal(config?.samplerRatio, 0.25)
  t.same(config?.propagators, ['tracecontext', 'baggage'])
  t.equal(config?.propagateUpstream, false)
  t.same(config?.resourceAttributes, { a: '1', b: 'x y' })
})

t.test('endpoints: the signal\'s own as is, else the base\'s with /v1/traces (one slash); a blank own one falls back', async (t) => {
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: ' http://c:4318// ' }).config?.url, 'http://c:4318/v1/traces')
  t.equal(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '   ', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).config?.url, 'http://c:4318/v1/traces')
  t.equal(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/x/', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://d:4318' }).config?.url, 'http://c:4318/x/')
  t.equal(load({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }).config, undefined, 'blank: off')
  t.equal(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: ' ' }).config, undefined, 'a blank signal endpoint and no base: off')
  t.equal(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/t', OTEL_SDK_DISABLED: ' TRUE ' }).config, undefined, 'OTEL_SDK_DISABLED')
  t.same(load({}).problems, [], 'nothing set: off, no problem')
})

t.test('a bad endpoint names the variable it came from', async (t) => {
  t.same(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'ftp://c/x' }).problems, ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: must be an http:// or https:// URL'])
  t.same(load({ OTEL_EXPORTER_OTLP_ENDPOINT: 'not a url' }).problems, ['OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL'])
  t.same(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: '', OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://c' }).problems, ['OTEL_EXPORTER_OTLP_ENDPOINT: must be an http:// or https:// URL'])
  t.same(load({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://c/x' }).problems, [])
})

t.test('the protocol: the signal\'s variable first; anything else named', async (t) => {
  t.equal(load({ ...ON, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).config?.protocol, 'http/json')
  t.equal(load({ ...ON, OTEL_EXPORTER_OTLP_PROTOCOL: ' http/json ' }).config?.protocol, 'http/json')
  t.same(load({ ...ON, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).problems, ['OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported: http/protobuf (the default) or http/json'])
})

t.test('the defaults', async (t) => {
  t.match(load(ON).config, {
    protocol: 'http/protobuf',
    serviceName: '',
    sampler: 'parentbased_always_on',
    samplerRatio: 1,
    propagators: ['tracecontext', 'baggage'],
    propagateUpstream: true,
    ...TRACING_DEFAULTS
  })
})

t.test('integers: blank is the default, the minimum is allowed, below it and non-integers named', async (t) => {
  const set = load({ ...ON, OTEL_EXPORTER_OTLP_TIMEOUT: ' ', OTEL_BSP_SCHEDULE_DELAY: '0', OTEL_BSP_MAX_QUEUE_SIZE: '1', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '1' })
  t.same(set.problems, [])
  t.match(set.config, { timeoutMs: TRACING_DEFAULTS.timeoutMs, scheduleDelayMs: 0, maxQueueSize: 1, maxExportBatchSize: 1 })
  t.same(load({ ...ON, OTEL_EXPORTER_OTLP_TIMEOUT: '0', OTEL_BSP_SCHEDULE_DELAY: '-1', OTEL_BSP_MAX_QUEUE_SIZE: '1.5', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '0' }).problems, [
    'OTEL_EXPORTER_OTLP_TIMEOUT: must be an integer of at least 1',
    'OTEL_BSP_SCHEDULE_DELAY: must be an integer of at least 0',
    'OTEL_BSP_MAX_QUEUE_SIZE: must be an integer of at least 1',
    'OTEL_BSP_MAX_EXPORT_BATCH_SIZE: must be an integer of at least 1'
  ])
})

t.test('the sampler and its ratio: 0 and 1 allowed, outside named', async (t) => {
  t.equal(load({ ...ON, OTEL_TRACES_SAMPLER_ARG: '0' }).config?.samplerRatio, 0)
  t.equal(load({ ...ON, OTEL_TRACES_SAMPLER_ARG: '  ' }).config?.samplerRatio, 1, 'blank: the default, not 0')
  t.equal(load({ ...ON, OTEL_TRACES_SAMPLER_ARG: '1' }).config?.samplerRatio, 1)
  t.same(load({ ...ON, OTEL_TRACES_SAMPLER_ARG: '1.01' }).problems, ['OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1'])
  t.same(load({ ...ON, OTEL_TRACES_SAMPLER_ARG: '-0.1' }).problems, ['OTEL_TRACES_SAMPLER_ARG: a ratio from 0 to 1'])
  t.match(load({ ...ON, OTEL_TRACES_SAMPLER: 'sometimes' }).problems, [/^OTEL_TRACES_SAMPLER: one of always_on, always_off, /])
})

t.test('propagators: none is none; unknown ones named', async (t) => {
  t.same(load({ ...ON, OTEL_PROPAGATORS: 'none' }).config?.propagators, [])
  t.same(load({ ...ON, OTEL_PROPAGATORS: 'tracecontext,none' }).config?.propagators, [], 'none among others is none')
  t.same(load({ ...ON, OTEL_PROPAGATORS: 'baggage' }).config?.propagators, ['baggage'])
  t.same(load({ ...ON, OTEL_PROPAGATORS: 'tracecontext,b3, xray' }).problems, ['OTEL_PROPAGATORS: b3, xray not supported: tracecontext, baggage or none'])
  t.same(load({ ...ON, OTEL_PROPAGATE_UPSTREAM: 'maybe' }).problems, ['OTEL_PROPAGATE_UPSTREAM: true or false'])
})

t.test('resource attributes: key=value entries, keys and values trimmed, values percent-decoded', async (t) => {
  const problems: string[] = []
  t.same(parseResourceAttributes('k = v=1 ,deployment.environment=prod%2Feu', problems), { k: 'v=1', 'deployment.environment': 'prod/eu' })
  t.same(problems, [])
  for (const bad of ['=v', ' =v', 'novalue', '  = x']) {
    const p: string[] = []
    t.same(parseResourceAttributes(`${bad},ok=1`, p), { ok: '1' }, bad)
    t.same(p, ['OTEL_RESOURCE_ATTRIBUTES: each entry must be key=value, separated by commas'], bad)
  }
  const p: string[] = []
  t.same(parseResourceAttributes('a=%zz,b=2', p), { b: '2' })
  t.same(p, ['OTEL_RESOURCE_ATTRIBUTES: the value of a is not valid percent-encoding'])
})
