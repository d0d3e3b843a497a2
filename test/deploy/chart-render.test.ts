// The chart rendered the way `helm template` renders it (test/deploy/chart-helm.ts), every
// object validated against Kubernetes' schemas: each ci/ values file and each mode with
// its switches, at the lowest Kubernetes version the chart claims, at 1.28 and at 1.31.
// Assertions are on the rendered objects, not on text.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { CHART, ofKind, one, podSpec, refusal, render, type JsonObject } from './chart-helm.js'
import { CI, MONITORING, checkSidecar } from './chart-expect.js'

const MIN_KUBE = /^kubeVersion:\s*"?>=\s*(\d+\.\d+)/m.exec(readFileSync(join(CHART, 'Chart.yaml'), 'utf8'))?.[1] ?? ''
const KUBE_VERSIONS = [MIN_KUBE, '1.28', '1.31']

t.setTimeout(240_000)

t.test('every ci/ values file at the lowest Kubernetes version the chart claims, 1.28 and 1.31', async (t) => {
  t.equal(MIN_KUBE, '1.21', 'Chart.yaml claims Kubernetes >= 1.21')
  await Promise.all(KUBE_VERSIONS.map(async (kube) => {
    // Native sidecar (the default): refused below 1.29, where the pod would hang at start.
    if (kube === '1.31') {
      const objects = await render(['demo', CHART, ...CI('example-values.yaml'), '--kube-version', kube])
      const deployment = one(objects, 'Deployment', 'demo-store-auth-proxy')
      checkSidecar(t, deployment, {
        native: true,
        host: '127.0.0.1',
        standalone: false,
        secretName: 'demo-store-auth-proxy',
        authUrl: 'http://demo-store-auth-proxy-stand-in:8081',
        shutdownDelayMs: '0'
      })
      t.match((podSpec(deployment).containers as JsonObject[]).map((c) => c.name), ['example-app'], 'the app is the only plain container')
      t.same(ofKind(objects, 'Deployment').map((d) => d.metadata.name).sort(), ['demo-store-auth-proxy', 'demo-store-auth-proxy-stand-in'])
      t.equal(ofKind(objects, 'ServiceMonitor').length, 0, 'no ServiceMonitor by default')
    } else {
      t.match(refusal(['demo', CHART, ...CI('example-values.yaml'), '--kube-version', kube]),
        /nativeSidecar needs Kubernetes >= 1\.29/, `example-values.yaml refused at ${kube}`)
    }

    const plain = await render(['demo', CHART, ...CI('plain-sidecar-values.yaml'), '--kube-version', kube])
    checkSidecar(t, one(plain, 'Deployment', 'demo-store-auth-proxy'), {
      native: false,
      host: '127.0.0.1',
      standalone: false,
      secretName: 'demo-store-auth-proxy',
      authUrl: 'http://demo-store-auth-proxy-stand-in:8081',
      shutdownDelayMs: '5000'
    })

    const standalone = await render(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', kube])
    checkSidecar(t, one(standalone, 'Deployment', 'gateway-store-auth-proxy'), {
      native: false,
      host: '0.0.0.0',
      standalone: true,
      secretName: 'gateway-store-auth-proxy',
      authUrl: 'http://gateway-store-auth-proxy-stand-in:8081',
      shutdownDelayMs: '5000'
    })
    const service = one(standalone, 'Service', 'gateway-store-auth-proxy')
    t.same(((service.spec as JsonObject).ports as JsonObject[]).map((p) => [p.name, p.port, p.targetPort]),
      [['authproxy', 8080, 'authproxy'], ['authproxy-admin', 9090, 'authproxy-admin']], `standalone Service at ${kube}`)
  }))
  t.match(refusal(['demo', CHART, ...CI('plain-sidecar-values.yaml'), '--kube-version', '1.20']),
    /kubeVersion|incompatible/, 'below the lowest version the chart claims: refused')
})

t.test('sidecar mode renders only the credentials Secret, or nothing with existingSecret', async (t) => {
  const objects = await render(['app', CHART, '--set', 'credentials.clientId=id', '--set', 'credentials.clientSecret=secret'])
  t.same(objects.map((o) => `${o.kind}/${o.metadata.name}`), ['Secret/app-store-auth-proxy'])
  t.same(await render(['app', CHART, '--set', 'credentials.existingSecret=creds']), [])
})

t.test('the guards and the schema refuse with their messages', async (t) => {
  const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
  t.match(refusal(['demo', CHART, '--set', 'mode=example', '--kube-version', '1.31']),
    /set credentials.existingSecret, or both credentials.clientId and credentials.clientSecret/)
  t.match(refusal(['gateway', CHART, ...CI('standalone-values.yaml'), '--set-json', 'networkPolicy.clients=[]']),
    /networkPolicy.clients is empty/)
  t.match(refusal([...example, ...MONITORING, '--set', 'metrics.prometheusRule.enabled=true', '--set', 'metrics.prometheusRule.tokenExpiryWarningMinutes=5']),
    /tokenExpiryWarningMinutes must be below proxy.tokenRefreshMarginMs/)
  // values.schema.json, checked by the render itself.
  const mistakes: Array<[string, string[], RegExp]> = [
    ['a misspelt key', ['--set', 'proxy.prot=8080'], /prot/],
    ['an unknown mode', ['--set', 'mode=daemonset'], /mode/],
    ['a port given as a string', ['--set-string', 'proxy.port=8080'], /proxy.port/],
    ['a port out of range', ['--set', 'proxy.adminPort=70000'], /adminPort/],
    ['a secret the unencoded form body cannot carry', ['--set', 'credentials.clientSecret=a&b'], /clientSecret/],
    ['a secret with whitespace', ['--set', 'credentials.clientSecret=a b'], /clientSecret/],
    ['an upstream URL with a query', ['--set', 'proxy.upstreamUrl=https://x.test/?a=1'], /upstreamUrl/],
    ['a negative delay', ['--set', 'proxy.shutdownDelayMs=-1'], /shutdownDelayMs/],
    ['a log level pino does not know', ['--set', 'proxy.logLevel=verbose'], /logLevel/],
    ['a relative mount path', ['--set', 'credentials.mountPath=secrets'], /mountPath/],
    ['an alert ratio above 1', ['--set', 'metrics.prometheusRule.upstream5xxRatio=2'], /upstream5xxRatio/]
  ]
  for (const [what, args, message] of mistakes) {
    t.match(refusal([...example, ...args]), message, `rejects ${what}`)
  }
  // A parent chart's `condition: store-auth-proxy.enabled` sets this key.
  t.ok((await render([...example, '--set', 'enabled=true'])).length > 0, 'accepts enabled')
})
