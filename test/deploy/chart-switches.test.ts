// The chart's documented switches and the fixes of an earlier review, each on a real
// render validated against Kubernetes' schemas (test/deploy/chart-helm.ts), at 1.31.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { CHART, envOf, ofKind, one, podSpec, refusal, render, sidecarOf, type Container, type Json, type JsonObject } from './chart-helm.js'
import { CI, MONITORING, checkSidecar, labelsOf, matches } from './chart-expect.js'

t.setTimeout(240_000)

t.test('the documented switches', async (t) => {
  const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']

  t.test('existingSecret: no Secret rendered; the proxy and the stand-in read the named one', async (t) => {
    const objects = await render([...example, '--set', 'credentials.existingSecret=ti-creds'])
    t.equal(ofKind(objects, 'Secret').length, 0)
    checkSidecar(t, one(objects, 'Deployment', 'demo-store-auth-proxy'), {
      native: true,
      host: '127.0.0.1',
      standalone: false,
      secretName: 'ti-creds',
      authUrl: 'http://demo-store-auth-proxy-stand-in:8081',
      shutdownDelayMs: '0'
    })
    const standIn = one(objects, 'Deployment', 'demo-store-auth-proxy-stand-in')
    t.match(podSpec(standIn).volumes, [{ secret: { secretName: 'ti-creds' } }])
  })

  t.test('nativeSidecar on and off, with an explicit shutdown delay', async (t) => {
    const off = await render([...example, '--set', 'nativeSidecar=false', '--set', 'proxy.shutdownDelayMs=2500'])
    const { container, init } = sidecarOf(one(off, 'Deployment', 'demo-store-auth-proxy'))
    t.notOk(init)
    t.equal(envOf(container).SHUTDOWN_DELAY_MS, '2500')
  })

  t.test('NetworkPolicy: off, default, and adminFrom letting the helm test pod through', async (t) => {
    t.equal(ofKind(await render([...example, '--set', 'networkPolicy.enabled=false']), 'NetworkPolicy').length, 0)
    const closed = one(await render(example), 'NetworkPolicy')
    t.same(((closed.spec as JsonObject).ingress as JsonObject[]), [{
      ports: [{ port: 'authproxy-admin', protocol: 'TCP' }],
      from: [{ podSelector: { matchLabels: { 'app.kubernetes.io/instance': 'demo', 'app.kubernetes.io/component': 'test' } } }]
    }], 'by default the admin port only for the helm test pod, never for every pod')

    const objects = await render([...example, '--set-json', 'networkPolicy.adminFrom=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]'])
    const policy = one(objects, 'NetworkPolicy')
    const from = (((policy.spec as JsonObject).ingress as JsonObject[])[0] as JsonObject).from as JsonObject[]
    t.match(from[0], { namespaceSelector: { matchLabels: { name: 'monitoring' } } })
    const testPod = one(objects, 'Pod')
    t.ok(from.some((peer) => peer.podSelector !== undefined && peer.namespaceSelector === undefined && matches(peer.podSelector, labelsOf(testPod))),
      'a peer selects the helm test pod')
    const service = one(objects, 'Service', 'demo-store-auth-proxy')
    t.notOk(matches({ matchLabels: (service.spec as JsonObject).selector } as JsonObject, labelsOf(testPod)),
      'the Service does not select the test pod')

    const standalone = await render(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31'])
    const rules = (one(standalone, 'NetworkPolicy').spec as JsonObject).ingress as JsonObject[]
    t.match(rules[0], { ports: [{ port: 'authproxy' }], from: [{ podSelector: { matchLabels: { 'store-auth-proxy/client': 'true' } } }] },
      'standalone: the proxy port only for clients')
  })

  t.test('ServiceMonitor only where the monitoring.coreos.com/v1 API exists', async (t) => {
    const on = [...example, '--set', 'metrics.serviceMonitor.enabled=true']
    t.equal(ofKind(await render(on), 'ServiceMonitor').length, 0, 'without the API: none')
    const objects = await render([...on, ...MONITORING])
    const monitor = one(objects, 'ServiceMonitor')
    const service = one(objects, 'Service', 'demo-store-auth-proxy')
    t.ok(matches((monitor.spec as JsonObject).selector as Json, labelsOf(service)), 'it selects the Service')
    t.match((monitor.spec as JsonObject).endpoints, [{ port: 'authproxy-admin', path: '/metrics' }])
  })

  t.test('PrometheusRule only where the API exists, in every mode', async (t) => {
    const on = ['app', CHART, '--set', 'credentials.existingSecret=creds', '--set', 'metrics.prometheusRule.enabled=true']
    t.same(await render(on), [], 'without the API: none')
    const rule = one(await render([...on, ...MONITORING, '--set', 'metrics.prometheusRule.labels.release=kps']), 'PrometheusRule')
    t.equal(labelsOf(rule).release, 'kps')
    t.ok(((rule.spec as JsonObject).groups as JsonObject[]).length > 0)
  })

  t.test('dashboard ConfigMap with the grafana_dashboard label, holding the chart\'s dashboard', async (t) => {
    t.equal(ofKind(await render(example), 'ConfigMap').length, 0, 'off by default')
    const map = one(await render([...example, '--set', 'metrics.dashboard.enabled=true']), 'ConfigMap')
    t.equal(labelsOf(map).grafana_dashboard, '1')
    const json = ((map.data as JsonObject)['store-auth-proxy.json']) as string
    t.same(JSON.parse(json), JSON.parse(readFileSync(join(CHART, 'dashboards/store-auth-proxy.json'), 'utf8')))
  })

  t.test('ports are values: the app\'s URL, probes, Service and annotations follow them', async (t) => {
    const objects = await render([...example, '--set', 'proxy.port=18080', '--set', 'proxy.adminPort=19090'])
    const deployment = one(objects, 'Deployment', 'demo-store-auth-proxy')
    const { container } = sidecarOf(deployment)
    t.match(envOf(container), { PORT: '18080', ADMIN_PORT: '19090' })
    t.same(container.ports, [{ name: 'authproxy-admin', containerPort: 19090, protocol: 'TCP' }])
    const app = (podSpec(deployment).containers as Container[])[0] as Container
    t.match(envOf(app).CALLER_TARGET_URL, /^http:\/\/localhost:18080\//)
    t.equal((((deployment.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations !== undefined, true)
    t.match(((deployment.spec as JsonObject).template as JsonObject).metadata, { annotations: { 'prometheus.io/port': '19090' } })
  })
})

t.test('section 2 fixes, each proven on a render', async (t) => {
  t.test('long release names and nameOverride: distinct, valid names and labels', async (t) => {
    // 53 characters: the longest release name Helm accepts.
    const release = 'a-very-long-release-name-for-the-shop-checkout-api-xy'
    t.equal(release.length, 53)
    // await render() fails on duplicate kind/name and on invalid names or labels (validate.mjs).
    const objects = await render([release, CHART, ...CI('example-values.yaml'), '--kube-version', '1.31', '--set', 'nameOverride=' + 'n'.repeat(63)])
    const names = ofKind(objects, 'Deployment').map((d) => d.metadata.name)
    t.equal(new Set(names).size, 2, `two Deployments, two names: ${names.join(', ')}`)
    t.ok(names.some((n) => n.endsWith('-stand-in')), 'the stand-in keeps its suffix')
    const testPod = one(objects, 'Pod')
    t.ok(testPod.metadata.name.length <= 63 && testPod.metadata.name.endsWith('-test-connection'))
    for (const o of objects) {
      for (const [k, v] of Object.entries(labelsOf(o))) t.ok(String(v).length <= 63, `${o.kind}/${o.metadata.name} label ${k}`)
    }
    // Also every fullname length in between.
    await Promise.all([44, 45, 46, 47, 50].map(async (n) =>
      await render(['r'.repeat(n), CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31'])))
  })

  t.test('a release name that cannot name a Service is refused with a message', async (t) => {
    t.match(refusal(['1demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']),
      /"1demo-store-auth-proxy[-a-z]*" is not a valid Service name.*fullnameOverride/)
    t.match(refusal(['my.demo', CHART, ...CI('standalone-values.yaml')]), /not a valid Service name/)
    await render(['1demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31', '--set', 'fullnameOverride=demo'])
    await render(['1app', CHART, '--set', 'credentials.existingSecret=creds'])
  })

  t.test('proxy.extraEnv values must be strings', async (t) => {
    t.match(refusal(['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31', '--set-json', 'proxy.extraEnv=[{"name":"NODE_OPTIONS_X","value":1}]']),
      /extraEnv.*Invalid type. Expected: string, given: integer/s)
    const objects = await render(['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31',
      '--set-json', 'proxy.extraEnv=[{"name":"X","value":"1"},{"name":"Y","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}]'])
    t.match(envOf(sidecarOf(one(objects, 'Deployment', 'demo-store-auth-proxy')).container), { X: '1', Y: '{"fieldRef":{"fieldPath":"metadata.name"}}' })
  })

  t.test('the memory limit is the cgroup the four loads were survived in, and the request covers the steady load', async (t) => {
    const values = readFileSync(join(CHART, 'values.yaml'), 'utf8')
    const mi = (q: string): number => Number(/^(\d+)Mi$/.exec(q)?.[1])
    const objects = await render(['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31'])
    const { resources } = sidecarOf(one(objects, 'Deployment', 'demo-store-auth-proxy')).container as unknown as { resources: { requests: { memory: string }, limits: { memory: string } } }
    // The figures values.yaml gives for bench/overload-cgroup.ts.
    const cgroup = Number(/in a (\d+) MiB memory cgroup/.exec(values)?.[1])
    const steady = Number(/keep-alive callers for 8 s, peak \d+-(\d+) MiB/.exec(values)?.[1])
    const burst = Number(/60 KB POSTs, peak \d+-(\d+) MiB/.exec(values)?.[1])
    t.ok(cgroup > 0 && steady > 0 && burst > 0, `values.yaml states the measurements (cgroup ${cgroup}, steady ${steady}, burst ${burst})`)
    t.equal(mi(resources.limits.memory), cgroup, `limit ${resources.limits.memory}: the cgroup the loads were survived in`)
    t.ok(burst < cgroup, `the burst peak ${burst} MiB stayed inside it`)
    t.ok(mi(resources.requests.memory) >= steady * 0.9 && mi(resources.requests.memory) <= cgroup, `request ${resources.requests.memory} near the steady peak ${steady} MiB`)
  })
})
