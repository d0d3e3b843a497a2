// egressProxy: HTTPS_PROXY from a plain URL or, when it carries credentials, from a Secret,
// never a URL with user:password@ in the pod spec; NO_PROXY always with the addresses the
// sidecar reaches directly. Each on a real render validated against Kubernetes' schemas.
import t from 'tap'
import { CHART, one, refusal, render, sidecarOf, type JsonObject } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const standalone = ['gateway', CHART, '--set', 'mode=standalone', '--set', 'credentials.existingSecret=c', '--kube-version', '1.31']

const envEntries = async (args: string[], release: string): Promise<JsonObject[]> =>
  (sidecarOf(one(await render(args), 'Deployment', `${release}-store-auth-proxy`)).container.env ?? []) as JsonObject[]
const entry = (env: JsonObject[], name: string): JsonObject | undefined => env.find((e) => e.name === name)

t.test('unset: no proxy variables', async (t) => {
  const env = await envEntries(example, 'demo')
  t.equal(entry(env, 'HTTPS_PROXY'), undefined)
  t.equal(entry(env, 'NO_PROXY'), undefined)
})

t.test('a plain URL: HTTPS_PROXY as a value; NO_PROXY with loopback, the stand-in and the given hosts', async (t) => {
  const env = await envEntries([...example, '--set', 'egressProxy.url=http://egress.proxy.svc:3128',
    '--set-json', 'egressProxy.noProxy=["internal.example",".svc.cluster.local","localhost"]'], 'demo')
  t.same(entry(env, 'HTTPS_PROXY'), { name: 'HTTPS_PROXY', value: 'http://egress.proxy.svc:3128' })
  t.same(entry(env, 'NO_PROXY'), {
    name: 'NO_PROXY', value: 'localhost,127.0.0.1,::1,demo-store-auth-proxy-stand-in,internal.example,.svc.cluster.local'
  }, 'in-pod addresses always, the stand-in in example mode, no duplicate')
  const alone = await envEntries([...standalone, '--set', 'egressProxy.url=http://egress:3128'], 'gateway')
  t.equal(entry(alone, 'NO_PROXY')?.value, 'localhost,127.0.0.1,::1', 'no stand-in: loopback only')
})

t.test('a URL with credentials: only through a Secret', async (t) => {
  t.match(refusal([...example, '--set', 'egressProxy.url=http://user:pass@egress:3128']),
    /egressProxy\.url carries credentials \(user:password@\).*egressProxy\.existingSecret/)
  t.match(refusal([...example, '--set', 'egressProxy.url=http://token@egress:3128']), /carries credentials/, 'a user alone too')
  const env = await envEntries([...example, '--set', 'egressProxy.existingSecret.name=egress-proxy', '--set', 'egressProxy.existingSecret.key=url'], 'demo')
  t.same(entry(env, 'HTTPS_PROXY'), { name: 'HTTPS_PROXY', valueFrom: { secretKeyRef: { name: 'egress-proxy', key: 'url' } } })
  t.ok(entry(env, 'NO_PROXY'), 'NO_PROXY with it')
  t.match(refusal([...example, '--set', 'egressProxy.existingSecret.name=egress-proxy']), /egressProxy\.existingSecret\.key is empty/)
  t.match(refusal([...example, '--set', 'egressProxy.url=http://egress:3128', '--set', 'egressProxy.existingSecret.name=p',
    '--set', 'egressProxy.existingSecret.key=url']), /egressProxy\.url or egressProxy\.existingSecret, not both/)
  t.match(refusal([...example, '--set', 'egressProxy.url=egress:3128']), /egressProxy/, 'not a URL: refused by the schema')
})
