// The README's embedding route, rendered: helm/examples/my-app adds the sidecar to its own
// Deployment through the chart's named templates, with store-auth-proxy packaged into its
// charts/ as `helm dependency update` does; and a parent passing a context built by hand
// (Helm without .Subcharts). Rendered and validated by test/deploy/chart-helm.ts.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { parse } from 'yaml'
import {
  CHART, EXAMPLE, ROOT, chartVersion, envOf, one, packagedParent, podSpec, refusal, render, sidecarOf,
  validate, type Container, type JsonObject, type K8s
} from './chart-helm.js'
import { checkSidecar } from './chart-expect.js'

t.setTimeout(240_000)

const example = packagedParent()
const handBuilt = packagedParent(join(ROOT, 'test/fixtures/chart-hand-built-context'))

t.test('the example declares this chart\'s current version, with the usual condition', async (t) => {
  const chart = parse(readFileSync(join(EXAMPLE, 'Chart.yaml'), 'utf8')) as { dependencies: JsonObject[] }
  t.match(chart.dependencies, [{ name: 'store-auth-proxy', version: chartVersion(CHART), condition: 'store-auth-proxy.enabled' }])
})

t.test('Kubernetes 1.31: a native sidecar in the parent\'s Deployment', async (t) => {
  const objects = await render(['shop', example, '--kube-version', '1.31'])
  t.same(objects.map((o) => `${o.kind}/${o.metadata.name}`).sort(), ['Deployment/shop-my-app', 'NetworkPolicy/shop-my-app'],
    'only the parent\'s objects (existingSecret)')
  t.same((one(objects, 'NetworkPolicy').spec as JsonObject).ingress, [
    { ports: [{ port: 'http', protocol: 'TCP' }] },
    {
      ports: [{ port: 'authproxy-admin', protocol: 'TCP' }],
      from: [
        { namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } },
        { podSelector: { matchLabels: { 'app.kubernetes.io/instance': 'shop', 'app.kubernetes.io/component': 'test' } } }
      ]
    }
  ], 'the parent\'s policy: the sidecar\'s admin port through store-auth-proxy.adminIngress, only from adminFrom')
  const deployment = one(objects, 'Deployment')
  checkSidecar(t, deployment, {
    native: true,
    host: '127.0.0.1',
    standalone: false,
    secretName: 'ti-store-api-credentials',
    authUrl: 'https://transact.ti.com',
    shutdownDelayMs: '0'
  })
  const app = (podSpec(deployment).containers as Container[])[0] as Container
  t.equal(app.name, 'my-app')
  t.equal(envOf(app).TI_STORE_API_URL, 'http://localhost:8080', 'the app calls the sidecar on localhost')
  t.match(((deployment.spec as JsonObject).template as JsonObject).metadata, {
    annotations: { 'prometheus.io/port': '9090' }
  })
  t.notOk(Object.keys((((deployment.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations as JsonObject)
    .some((k) => k.startsWith('checksum/secret')), 'nothing derived from the credentials')
})

t.test('Kubernetes 1.28: the named template refuses a native sidecar; a plain one renders', async (t) => {
  // Without the guard in the named template, this rendered and the pod hung at start.
  t.match(refusal(['shop', example, '--kube-version', '1.28']), /nativeSidecar needs Kubernetes >= 1\.29 \(this is v1\.28\)/)
  const objects = await render(['shop', example, '--kube-version', '1.28', '--set', 'store-auth-proxy.nativeSidecar=false'])
  const deployment = one(objects, 'Deployment')
  checkSidecar(t, deployment, {
    native: false,
    host: '127.0.0.1',
    standalone: false,
    secretName: 'ti-store-api-credentials',
    authUrl: 'https://transact.ti.com',
    shutdownDelayMs: '5000'
  })
  t.same((podSpec(deployment).containers as Container[]).map((c) => c.name), ['my-app', 'store-auth-proxy'])
})

t.test('the lowest version the chart claims, 1.21, with a plain sidecar', async (t) => {
  const objects = await render(['shop', example, '--kube-version', '1.21', '--set', 'store-auth-proxy.nativeSidecar=false'])
  t.notOk(sidecarOf(one(objects, 'Deployment')).init)
})

t.test('condition: store-auth-proxy.enabled=false renders the app alone', async (t) => {
  const deployment = one(await render(['shop', example, '--set', 'store-auth-proxy.enabled=false']), 'Deployment')
  t.same((podSpec(deployment).containers as Container[]).map((c) => c.name), ['my-app'])
  t.equal(podSpec(deployment).initContainers, undefined)
})

t.test('ports moved off a clash: the app\'s URL follows proxy.port', async (t) => {
  const objects = await render(['shop', example, '--kube-version', '1.31', '--set', 'store-auth-proxy.proxy.port=18080', '--set', 'store-auth-proxy.proxy.adminPort=19090'])
  const deployment = one(objects, 'Deployment')
  const { container } = sidecarOf(deployment)
  t.match(envOf(container), { PORT: '18080', ADMIN_PORT: '19090' })
  t.equal(envOf((podSpec(deployment).containers as Container[])[0] as Container).TI_STORE_API_URL, 'http://localhost:18080')
})

t.test('credentials in values: the dependency renders the Secret the volume names', async (t) => {
  const objects = await render(['shop', example, '--kube-version', '1.31', '--set', 'store-auth-proxy.credentials.existingSecret=',
    '--set', 'store-auth-proxy.credentials.clientId=id', '--set', 'store-auth-proxy.credentials.clientSecret=secret'])
  const secret = one(objects, 'Secret')
  t.equal(secret.metadata.name, 'shop-store-auth-proxy')
  t.match(podSpec(one(objects, 'Deployment')).volumes, [{ secret: { secretName: 'shop-store-auth-proxy' } }])
})

t.test('a context built by hand must carry Capabilities for the version check', async (t) => {
  const pod = one(await render(['shop', handBuilt, '--kube-version', '1.31']), 'Pod')
  t.match(pod, { spec: { initContainers: [{ name: 'store-auth-proxy', restartPolicy: 'Always' }] } })
  t.match(refusal(['shop', handBuilt, '--kube-version', '1.28']), /nativeSidecar needs Kubernetes >= 1\.29/)
  t.match(refusal(['shop', handBuilt, '--set', 'passCapabilities=false']),
    /has no Capabilities.*add "Capabilities" \.Capabilities/)
})

t.test('without Helm: the Kustomize patch is the named template\'s render, and patches a valid Deployment', async (t) => {
  const dir = join(ROOT, 'helm/examples/kustomize')
  const patch = parse(readFileSync(join(dir, 'store-auth-proxy-sidecar.yaml'), 'utf8')) as K8s
  // The command the patch's header and the chart README give.
  const rendered = one(await render(['sap', CHART, '--kube-version', '1.30', '--set', 'mode=example',
    '--set', 'credentials.existingSecret=ti-store-api-credentials', '--set', 'image.repository=registry.example.com/store-auth-proxy',
    '--show-only', 'templates/deployment.yaml']), 'Deployment')
  const patchSpec = podSpec(patch)
  t.same(patchSpec.initContainers, [sidecarOf(rendered).container], 'the sidecar container, as rendered')
  t.same(patchSpec.volumes, (podSpec(rendered).volumes as JsonObject[]).filter((v) => v.name === 'store-auth-proxy-credentials'))
  const annotations = (((rendered.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations as JsonObject
  t.same((((patch.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations,
    Object.fromEntries(Object.entries(annotations).filter(([k]) => k.startsWith('prometheus.io/'))))

  // What `kubectl apply -k` would apply: the app's Deployment with the patch merged in.
  const app = parse(readFileSync(join(dir, 'deployment.yaml'), 'utf8')) as K8s
  const appTemplate = (app.spec as JsonObject).template as JsonObject
  Object.assign(appTemplate.metadata as JsonObject, { annotations: (((patch.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations })
  Object.assign(appTemplate.spec as JsonObject, { initContainers: patchSpec.initContainers, volumes: patchSpec.volumes })
  const checked = await validate(JSON.stringify(app))
  t.equal(checked.status, 0, checked.stdout + checked.stderr)
  const kustomization = parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as JsonObject
  t.match(kustomization, { resources: ['deployment.yaml'], patches: [{ path: 'store-auth-proxy-sidecar.yaml', target: { kind: 'Deployment', name: app.metadata.name } }] })
})
