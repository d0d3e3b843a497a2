// tracing: the OTEL_* variables only with an endpoint, each from its value, read back by the
// sidecar's own parser (src/config/tracing.ts) as the settings given; the schema refuses what
// the sidecar would refuse at start. Each on a real render validated against Kubernetes' schemas.
import t from 'tap'
import { loadTracing } from '../../src/config/tracing.js'
import { CHART, envOf, one, refusal, render, sidecarOf } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const standalone = ['gateway', CHART, '--set', 'mode=standalone', '--set', 'credentials.existingSecret=c', '--kube-version', '1.31']

const envFor = async (args: string[], release: string): Promise<Record<string, string>> =>
  envOf(sidecarOf(one(await render(args), 'Deployment', `${release}-store-auth-proxy`)).container)
const otel = (env: Record<string, string>): Record<string, string> =>
  Object.fromEntries(Object.entries(env).filter(([name]) => name.startsWith('OTEL_')))

t.test('no endpoint: no OTEL_ variable, whatever else is set', async (t) => {
  t.same(otel(await envFor(example, 'demo')), {}, 'example mode')
  t.same(otel(await envFor(standalone, 'gateway')), {}, 'standalone mode')
  t.same(otel(await envFor([...example, '--set', 'tracing.serviceName=shop', '--set-json', 'tracing.samplerArg=0.5'], 'demo')), {},
    'the other values alone turn nothing on')
})

t.test('an endpoint: every setting rendered, read by the sidecar as given', async (t) => {
  const env = otel(await envFor([...standalone, '--set', 'tracing.endpoint=http://otel-collector.observability:4318',
    '--set', 'tracing.protocol=http/json', '--set', 'tracing.serviceName=shop-gateway', '--set', 'tracing.sampler=parentbased_traceidratio',
    '--set-json', 'tracing.samplerArg=0.25', '--set', 'tracing.propagateUpstream=false',
    '--set-json', 'tracing.resourceAttributes={"deployment.environment.name":"prod","service.namespace":"shop"}'], 'gateway'))
  t.same(env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel-collector.observability:4318',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'shop-gateway',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.25',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment.name=prod,service.namespace=shop',
    OTEL_PROPAGATE_UPSTREAM: 'false'
  })
  const problems: string[] = []
  t.match(loadTracing(env, problems), {
    url: 'http://otel-collector.observability:4318/v1/traces',
    protocol: 'http/json',
    serviceName: 'shop-gateway',
    sampler: 'parentbased_traceidratio',
    samplerRatio: 0.25,
    resourceAttributes: { 'deployment.environment.name': 'prod', 'service.namespace': 'shop' },
    propagateUpstream: false
  })
  t.same(problems, [], 'the sidecar starts with them')
})

t.test('an endpoint alone: the defaults, the sidecar\'s own', async (t) => {
  const env = otel(await envFor([...example, '--set', 'tracing.endpoint=http://jaeger.observability:4318'], 'demo'))
  t.same(env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger.observability:4318',
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_TRACES_SAMPLER: 'parentbased_always_on',
    OTEL_PROPAGATE_UPSTREAM: 'true'
  })
  const problems: string[] = []
  t.match(loadTracing({}, problems), undefined)
  const defaults = loadTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger.observability:4318' }, problems)
  t.same(loadTracing(env, problems), defaults, 'the same settings as the endpoint alone in the sidecar')
  t.same(problems, [])
})

t.test('what the sidecar would refuse, the schema refuses; extraEnv cannot set them twice', async (t) => {
  const on = [...example, '--set', 'tracing.endpoint=http://jaeger:4318']
  t.match(refusal([...example, '--set', 'tracing.endpoint=jaeger:4318']), /tracing/, 'not an http(s) URL')
  t.match(refusal([...on, '--set', 'tracing.protocol=grpc']), /tracing/, 'no gRPC')
  t.match(refusal([...on, '--set', 'tracing.sampler=sometimes']), /tracing/, 'an unknown sampler')
  t.match(refusal([...on, '--set', 'tracing.samplerArg=2']), /tracing/, 'a ratio above 1')
  t.match(refusal([...on, '--set', 'tracing.endpoint=http://collector:99999']), /tracing/, 'a port past 65535')
  t.match(refusal([...on, '--set-json', 'proxy.extraEnv=[{"name":"OTEL_TRACES_SAMPLER","value":"always_on"}]']),
    /proxy\.extraEnv sets OTEL_TRACES_SAMPLER, which the chart already renders/, 'set with tracing on: refused')
  t.match(refusal([...on, '--set', 'tracing.serviceName=s', '--set-json', 'proxy.extraEnv=[{"name":"OTEL_SERVICE_NAME","value":"x"}]']),
    /proxy\.extraEnv sets OTEL_SERVICE_NAME/)
  const off = otel(await envFor([...example, '--set-json', 'proxy.extraEnv=[{"name":"OTEL_EXPORTER_OTLP_ENDPOINT","value":"http://c:4318"}]'], 'demo'))
  t.same(off, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, 'with tracing off, extraEnv still may set them (as before these values)')
})

t.test('what the schema accepts, the sidecar starts with, as given (an outside review)', async (t) => {
  const on = [...standalone, '--set', 'tracing.endpoint=http://otel-collector.observability:4318']
  const read = async (extra: string[]) => {
    const env = otel(await envFor([...on, ...extra], 'gateway'))
    const problems: string[] = []
    return { env, problems, config: loadTracing(env, problems) }
  }
  const odd = await read(['--set-json', 'tracing.resourceAttributes={"team.budget":"100%","note":"a%20b","list":"x,y"}'])
  t.same(odd.problems, [], 'a %, a percent-encoding look-alike and a comma in values: the sidecar starts')
  t.same(odd.config?.resourceAttributes, { 'team.budget': '100%', note: 'a%20b', list: 'x,y' }, 'each value as given in values')
  const nulls = await read(['--set-json', 'tracing.protocol=null', '--set-json', 'tracing.sampler=null', '--set-json', 'tracing.propagateUpstream=null'])
  t.same(nulls.problems, [], 'values removed by an override: the sidecar starts')
  t.notOk('OTEL_EXPORTER_OTLP_PROTOCOL' in nulls.env || 'OTEL_TRACES_SAMPLER' in nulls.env || 'OTEL_PROPAGATE_UPSTREAM' in nulls.env, 'and none is rendered: the sidecar\'s defaults')
  for (const endpoint of ['http://[::1]:4318', 'https://collector:65535/otlp', 'http://10.0.0.7']) {
    const { problems } = await read(['--set', `tracing.endpoint=${endpoint}`])
    t.same(problems, [], `${endpoint}: accepted by both`)
  }
})
