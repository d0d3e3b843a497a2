// The default checks of kube-linter, Polaris and Checkov that a rendered pod would trip,
// written from the tools' published rule definitions (their binaries cannot run here):
// every finding must be fixed in the render or carry that tool's exemption annotation
// (chart README, "Security and admission").
import t from 'tap'
import { CHART, EXAMPLE, packagedParent, render, type Container, type Json, type JsonObject, type K8s } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

type Finding = [tool: 'kube-linter' | 'polaris' | 'checkov', check: string, what: string]

const containersOf = (spec: JsonObject): Container[] =>
  [...((spec.initContainers ?? []) as Container[]), ...((spec.containers ?? []) as Container[])]
const podSpecOf = (o: K8s): JsonObject | undefined =>
  o.kind === 'Pod' ? o.spec as JsonObject : o.kind === 'Deployment' ? ((o.spec as JsonObject).template as JsonObject).spec as JsonObject : undefined
const envOf = (c: Container): JsonObject[] => (c.env ?? []) as JsonObject[]
const limitsOf = (c: Container): JsonObject => (((c.resources ?? {}) as JsonObject).limits ?? {}) as JsonObject

/** What the published rules find in one workload. */
function findings (o: K8s): Finding[] {
  const spec = podSpecOf(o)
  if (spec === undefined) return []
  const out: Finding[] = []
  for (const c of containersOf(spec)) {
    const at = `${o.kind}/${o.metadata.name} ${c.name}`
    // kube-linter env-var-secret: name (?i).*secret.* with a literal value.
    if (envOf(c).some((e) => /secret/i.test(String(e.name)) && typeof e.value === 'string' && e.value !== '')) out.push(['kube-linter', 'env-var-secret', at])
    // Polaris sensitiveContainerEnvVar: names matching password, token, bearer, secret, ...
    if (envOf(c).some((e) => /password|token|bearer|secret|^AWS_SECRET_ACCESS_KEY$|^GOOGLE_APPLICATION_CREDENTIALS$/i.test(String(e.name)))) {
      out.push(['polaris', 'sensitiveContainerEnvVar', at])
    }
    // kube-linter unset-cpu-requirements, Polaris cpuLimitsMissing, Checkov CKV_K8S_11.
    if (limitsOf(c).cpu === undefined) {
      out.push(['kube-linter', 'unset-cpu-requirements', at], ['polaris', 'cpuLimitsMissing', at], ['checkov', 'CKV_K8S_11', at])
    }
    // Checkov CKV_K8S_35: a secret through env.
    if (envOf(c).some((e) => ((e.valueFrom ?? {}) as JsonObject).secretKeyRef !== undefined)) out.push(['checkov', 'CKV_K8S_35', at])
    // Checkov CKV_K8S_15: pull policy not Always.
    if (c.imagePullPolicy !== 'Always') out.push(['checkov', 'CKV_K8S_15', at])
    // Checkov CKV_K8S_43: no digest.
    if (!String(c.image).includes('@')) out.push(['checkov', 'CKV_K8S_43', at])
    // Polaris livenessProbeMissing/readinessProbeMissing, Checkov CKV_K8S_8/9 (not on init containers).
    if (!containersOf({ initContainers: spec.initContainers ?? [] } as JsonObject).includes(c)) {
      if (c.livenessProbe === undefined) out.push(['polaris', 'livenessProbeMissing', at], ['checkov', 'CKV_K8S_8', at])
      if (c.readinessProbe === undefined) out.push(['polaris', 'readinessProbeMissing', at], ['checkov', 'CKV_K8S_9', at])
    }
  }
  // Checkov CKV_K8S_21: a namespace other than default.
  const namespace = o.metadata.namespace
  if (namespace === undefined || namespace === 'default') out.push(['checkov', 'CKV_K8S_21', `${o.kind}/${o.metadata.name}`])
  if (o.kind === 'Deployment') {
    const replicas = Number((o.spec as JsonObject).replicas ?? 1)
    // kube-linter no-anti-affinity (replicas >= 2); Polaris deploymentMissingReplicas (< 2).
    if (replicas >= 2 && ((spec.affinity ?? {}) as JsonObject).podAntiAffinity === undefined) out.push(['kube-linter', 'no-anti-affinity', o.metadata.name])
    if (replicas < 2) out.push(['polaris', 'deploymentMissingReplicas', o.metadata.name])
  }
  return out
}

/** Whether the object carries the tool's exemption for the check. */
function exempted (o: K8s, [tool, check]: Finding): boolean {
  const annotations = (o.metadata.annotations ?? {}) as Record<string, Json>
  if (tool === 'kube-linter') return typeof annotations[`ignore-check.kube-linter.io/${check}`] === 'string'
  if (tool === 'polaris') return annotations[`polaris.fairwinds.com/${check}-exempt`] === 'true'
  return Object.entries(annotations).some(([k, v]) => k.startsWith('checkov.io/skip') && String(v).split('=')[0] === check &&
    String(v).split('=').length === 2)
}

/** Findings left for the user to settle, by design: a digest and pull policy, the namespace. */
const USERS: Record<string, string> = {
  CKV_K8S_43: 'set image.digest',
  CKV_K8S_15: 'pinned by image.digest, or pullPolicy Always',
  CKV_K8S_21: 'install into your own namespace (-n)',
  deploymentMissingReplicas: 'replicaCount 2 or more (the default)'
}

// The parent's own container is its authors' business: only the sidecar's findings count there.
const all = (): boolean => true
const renders: Array<[string, string[], (f: Finding) => boolean]> = [
  ['example', ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31', '--namespace', 'shop', '--set', 'replicaCount=2'], all],
  ['standalone', ['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31', '--namespace', 'shop'], all],
  ['standalone behind an egress proxy from a Secret', ['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31', '--namespace', 'shop',
    '--set', 'egressProxy.existingSecret.name=egress', '--set', 'egressProxy.existingSecret.key=url'], all],
  ['plain sidecar', ['demo', CHART, ...CI('plain-sidecar-values.yaml'), '--kube-version', '1.31', '--namespace', 'shop'], all],
  ['embedded in a parent', ['shop', packagedParent(EXAMPLE), '--kube-version', '1.31', '--namespace', 'shop'], (f) => f[2].endsWith(' store-auth-proxy')]
]

for (const [name, args, ours] of renders) {
  t.test(`${name}: every default-check finding is fixed or exempted`, async (t) => {
    const objects = await render(args)
    let checked = 0
    for (const o of objects) {
      for (const finding of findings(o).filter(ours)) {
        checked++
        if (USERS[finding[1]] !== undefined && !exempted(o, finding)) continue
        t.ok(exempted(o, finding), `${finding.join(' ')}: exempted`)
      }
    }
    t.ok(checked > 0, `${checked} findings looked at`)
  })
}

t.test('with image.digest: the image is pinned and the pull-policy finding exempted', async (t) => {
  const digest = `sha256:${'a'.repeat(64)}`
  const objects = await render(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31', '--namespace', 'shop', '--set', `image.digest=${digest}`])
  const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'gateway-store-auth-proxy') as K8s
  const [sidecar] = containersOf(podSpecOf(deployment) as JsonObject)
  t.equal(sidecar?.image, `store-auth-proxy:0.1.0@${digest}`)
  const left = findings(deployment).filter((f) => !exempted(deployment, f))
  t.same(left.map((f) => f[1]), [], 'nothing left on the proxy\'s Deployment')
})
