// What the chart refuses to render and what it renders for a cluster's admission policies
// (chart README, "Security and admission"), each on a real render validated against
// Kubernetes' schemas (test/deploy/chart-helm.ts).
import t from 'tap'
import { CHART, envOf, helmTemplate, NEEDS_HELM_TEMPLATE, ofKind, one, packagedParent, podSpec, refusal, render, sidecarOf, type Json, type JsonObject, type K8s } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const standalone = ['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31']

t.test('refusals: one clear line each', async (t) => {
  const cases: Array<[string, string[], RegExp]> = [
    ['standalone LoadBalancer publishes the proxy port', [...standalone, '--set', 'service.type=LoadBalancer'],
      /service\.type=LoadBalancer would publish the proxy port, which is authenticated to TI as you/],
    ['standalone NodePort publishes the proxy port', [...standalone, '--set', 'service.type=NodePort'],
      /service\.type=NodePort would publish the proxy port/],
    ['example LoadBalancer publishes the admin port and /status', [...example, '--set', 'service.type=LoadBalancer'],
      /service\.type=LoadBalancer would publish the admin port and its \/status/],
    ['shutdown grace beyond the termination grace period', [...example, '--set', 'proxy.shutdownGraceMs=40000', '--set', 'terminationGracePeriodSeconds=10'],
      /proxy\.shutdownDelayMs \(0\) \+ proxy\.shutdownGraceMs \(40000\) \+ 1000 ms to exit must stay below terminationGracePeriodSeconds \(10 s\)/],
    ['shutdown delay plus grace exactly at the period', [...standalone, '--set', 'proxy.shutdownDelayMs=5000', '--set', 'proxy.shutdownGraceMs=24000', '--set', 'terminationGracePeriodSeconds=30'],
      /\(5000\) \+ proxy\.shutdownGraceMs \(24000\)/],
    ['plain sidecar: the topology\'s 5 s delay counts', [...example, '--set', 'nativeSidecar=false', '--set', 'proxy.shutdownGraceMs=24500'],
      /\(5000\) \+ proxy\.shutdownGraceMs \(24500\)/],
    ['proxy port on the pod address in example mode', [...example, '--set', 'proxy.host=0.0.0.0'],
      /proxy\.host=0\.0\.0\.0 would let any pod of the cluster call the proxy/]
  ]
  for (const [name, args, message] of cases) {
    const stderr = refusal(args)
    t.match(stderr, message, name)
    t.equal(stderr.split('\n').filter((l) => l.includes('store-auth-proxy:')).length, 1, `${name}: one line`)
  }
})

t.test('the named sidecar template refuses a non-loopback proxy host in the parent\'s pod too', async (t) => {
  t.match(refusal(['shop', packagedParent(), '--kube-version', '1.31', '--set', 'store-auth-proxy.proxy.host=0.0.0.0']),
    /proxy\.host=0\.0\.0\.0 would let any pod of the cluster call the proxy.*in mode sidecar it must be loopback/)
})

t.test('what still renders next to the refusals', async (t) => {
  t.ok(await render([...standalone, '--set', 'proxy.shutdownDelayMs=5000', '--set', 'proxy.shutdownGraceMs=23999', '--set', 'terminationGracePeriodSeconds=30']),
    'delay + grace + 1 s just below the period')
  t.ok(await render([...example, '--set', 'proxy.host=::1']), 'IPv6 loopback in example mode')
  t.ok(await render([...standalone, '--set', 'proxy.host=::']), 'all addresses in standalone mode')
})

t.test('nothing derived from the client secret outside its Secret: two secrets, identical pod templates', async (t) => {
  for (const base of [example, standalone]) {
    const render2 = async (secret: string): Promise<K8s[]> =>
      await render([...base, '--set', 'credentials.existingSecret=', '--set', 'credentials.clientId=id', '--set', `credentials.clientSecret=${secret}`])
    const a = await render2('first-Secret-1')
    const b = await render2('second-Secret-2')
    const others = (objects: K8s[]): K8s[] => objects.filter((o) => o.kind !== 'Secret')
    t.same(others(a), others(b), `${base[0] ?? ''}: every object but the Secret is identical`)
    t.ok(ofKind(a, 'Deployment').length > 0, 'with a Deployment')
    t.notSame(ofKind(a, 'Secret'), ofKind(b, 'Secret'), 'the Secrets differ')
  }
})

t.test('the admin listener: its address and /status as values', async (t) => {
  const defaults = envOf(sidecarOf(one(await render(example), 'Deployment', 'demo-store-auth-proxy')).container)
  t.match(defaults, { ADMIN_HOST: '0.0.0.0', STATUS_ENDPOINT: 'true' }, 'defaults')
  const set = envOf(sidecarOf(one(await render([...example, '--set', 'proxy.adminHost=::', '--set', 'proxy.statusEndpoint=false']),
    'Deployment', 'demo-store-auth-proxy')).container)
  t.match(set, { ADMIN_HOST: '::', STATUS_ENDPOINT: 'false' }, 'set')
  const env = (sidecarOf(one(await render([...example, '--set', 'proxy.adminHost=::']), 'Deployment', 'demo-store-auth-proxy')).container.env ?? []) as JsonObject[]
  t.equal(env.filter((e) => e.name === 'ADMIN_HOST').length, 1, 'ADMIN_HOST once')
})

t.test('NOTES say who reaches the admin port', { skip: NEEDS_HELM_TEMPLATE }, async (t) => {
  const notes = (args: string[]): string => {
    const out = helmTemplate([...args, '--show-notes'])
    t.equal(out.status, 0, out.stderr)
    return out.stderr
  }
  t.match(notes(example), /networkPolicy\.adminFrom is empty: only the helm test pod/)
  t.notMatch(notes([...example, '--set-json', 'networkPolicy.adminFrom=[{"podSelector":{}}]']), /adminFrom is empty/)
  t.match(notes(['app', CHART, '--set', 'credentials.existingSecret=c']), /including store-auth-proxy\.adminIngress in your pod's NetworkPolicy/)
})

t.test('replicas spread softly by default; the PDB lets unhealthy pods go; the helm test pod has resources', async (t) => {
  const objects = await render([...standalone, '--kube-version', '1.31'])
  const spec = podSpec(one(objects, 'Deployment', 'gateway-store-auth-proxy'))
  const selector = { 'app.kubernetes.io/name': 'store-auth-proxy', 'app.kubernetes.io/instance': 'gateway' }
  t.same(spec.affinity, {
    podAntiAffinity: {
      preferredDuringSchedulingIgnoredDuringExecution: [{
        weight: 100, podAffinityTerm: { topologyKey: 'kubernetes.io/hostname', labelSelector: { matchLabels: selector } }
      }]
    }
  }, 'preferred anti-affinity over nodes')
  t.same(spec.topologySpreadConstraints, [{
    maxSkew: 1, topologyKey: 'topology.kubernetes.io/zone', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: selector }
  }], 'soft spread over zones')
  t.equal((one(objects, 'PodDisruptionBudget').spec as JsonObject).unhealthyPodEvictionPolicy, 'AlwaysAllow')
  t.match(one(objects, 'Pod').spec, { containers: [{ resources: { requests: { cpu: String, memory: String }, limits: { cpu: String, memory: String } } }] })

  const single = podSpec(one(await render([...standalone, '--set', 'replicaCount=1']), 'Deployment', 'gateway-store-auth-proxy'))
  t.equal(single.affinity, undefined, 'one replica: nothing to spread')
  const off = podSpec(one(await render([...standalone, '--set', 'spreadReplicas=false']), 'Deployment', 'gateway-store-auth-proxy'))
  t.equal(off.topologySpreadConstraints, undefined, 'spreadReplicas=false: none')
  const own = podSpec(one(await render([...standalone, '--set-json', 'affinity={"nodeAffinity":{}}']), 'Deployment', 'gateway-store-auth-proxy'))
  t.same(own.affinity, { nodeAffinity: {} }, 'the user\'s affinity replaces the default')
  const old = await render(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.26'])
  t.equal((one(old, 'PodDisruptionBudget').spec as JsonObject).unhealthyPodEvictionPolicy, undefined, 'not before Kubernetes 1.27')
})

t.test('every object carries the release namespace', async (t) => {
  const objects = await render([...example, '--namespace', 'shop', '--set', 'metrics.dashboard.enabled=true'])
  t.ok(objects.length > 5)
  for (const o of objects) t.equal(o.metadata.namespace, 'shop', `${o.kind}/${o.metadata.name}`)
})

t.test('the startup probe: /livez by default (pods start while TI is down), /readyz by choice', async (t) => {
  const probe = async (args: string[]): Promise<Json> =>
    sidecarOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy')).container.startupProbe as Json
  t.match(await probe([]), { httpGet: { path: '/livez', port: 'authproxy-admin' } }, 'default: started once listening')
  t.match(await probe(['--set', 'startupProbe.httpGet.path=/readyz']), { httpGet: { path: '/readyz' } }, 'chosen: started with the first token')
})

t.test('proxy.extraEnv cannot override what the chart renders, nor pass a secret as a value', async (t) => {
  t.match(refusal([...example, '--set-json', 'proxy.extraEnv=[{"name":"HOST","value":"0.0.0.0"}]']),
    /proxy\.extraEnv sets HOST, which the chart already renders from its values/, 'HOST: the loopback check would be bypassed')
  t.match(refusal([...example, '--set-json', 'proxy.extraEnv=[{"name":"ADMIN_HOST","value":"::"}]']), /extraEnv sets ADMIN_HOST/)
  t.match(refusal([...example, '--set-json', 'proxy.extraEnv=[{"name":"CLIENT_SECRET","value":"x"}]']),
    /extraEnv sets CLIENT_SECRET, a secret as an env value/)
  const env = sidecarOf(one(await render([...example, '--set-json', 'proxy.extraEnv=[{"name":"UV_THREADPOOL_SIZE","value":"2"},{"name":"HOSTNAME_X","value":"y"}]']),
    'Deployment', 'demo-store-auth-proxy')).container.env as JsonObject[]
  t.same(env.slice(-2), [{ name: 'UV_THREADPOOL_SIZE', value: '2' }, { name: 'HOSTNAME_X', value: 'y' }], 'other names pass, last')
})
