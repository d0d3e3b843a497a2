// What the rendered sidecar must hold in every mode, shared by the chart's render tests.
import { join } from 'node:path'
import type { Test } from 'tap'
import { CHART, envOf, podSpec, sidecarOf, type Container, type Json, type JsonObject, type K8s } from './chart-helm.js'

type Tap = Test

/** `-f` with one of the chart's ci/ values files. */
export const CI = (name: string): string[] => ['-f', join(CHART, 'ci', name)]
/** The prometheus-operator API, as `helm template --api-versions` declares it. */
export const MONITORING = ['--api-versions', 'monitoring.coreos.com/v1']

export const labelsOf = (o: K8s | JsonObject): Record<string, Json> => ((o.metadata as JsonObject).labels ?? {}) as Record<string, Json>
/** Whether a LabelSelector's matchLabels select these labels. */
export const matches = (selector: Json, labels: Record<string, Json>): boolean =>
  Object.entries((selector as JsonObject).matchLabels as JsonObject).every(([k, v]) => labels[k] === v)

export interface Expect {
  native: boolean
  host: string
  standalone: boolean
  secretName: string
  authUrl: string
  shutdownDelayMs: string
}

/** What every rendering of the sidecar container must hold. */
export function checkSidecar (t: Tap, deployment: K8s, expect: Expect): Container {
  const { container, init } = sidecarOf(deployment)
  t.equal(init, expect.native, `the sidecar is ${expect.native ? 'an init' : 'a plain'} container`)
  t.equal(container.restartPolicy, expect.native ? 'Always' : undefined, 'restartPolicy Always only for a native sidecar')
  t.match(envOf(container), {
    AUTH_URL: expect.authUrl,
    UPSTREAM_URL: expect.authUrl,
    CLIENT_ID_FILE: '/var/run/secrets/store-auth-proxy/client_id',
    CLIENT_SECRET_FILE: '/var/run/secrets/store-auth-proxy/client_secret',
    HOST: expect.host,
    PORT: '8080',
    ADMIN_HOST: '0.0.0.0',
    ADMIN_PORT: '9090',
    // Helm reads numbers as float64: these would be 3e+05 without int64.
    TOKEN_REFRESH_MARGIN_MS: '300000',
    REQUEST_TIMEOUT_MS: '300000',
    SHUTDOWN_DELAY_MS: expect.shutdownDelayMs
  }, 'env')
  t.notOk(Object.keys(envOf(container)).some((k) => /^CLIENT_(ID|SECRET)$/.test(k)), 'credentials only as files, never in env')
  const ports = (container.ports as JsonObject[]).map((p) => [p.name, p.containerPort])
  t.same(ports, [...(expect.standalone ? [['authproxy', 8080]] : []), ['authproxy-admin', 9090]], 'ports')
  t.match(container, {
    livenessProbe: { httpGet: { path: '/livez', port: 'authproxy-admin' } },
    readinessProbe: { httpGet: { path: '/readyz', port: 'authproxy-admin' } },
    startupProbe: { httpGet: { path: '/livez', port: 'authproxy-admin' } },
    securityContext: {
      runAsNonRoot: true,
      runAsUser: 65532,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' }
    },
    resources: { requests: { memory: String }, limits: { memory: String } },
    volumeMounts: [{ name: 'store-auth-proxy-credentials', mountPath: '/var/run/secrets/store-auth-proxy', readOnly: true }]
  }, 'probes on the admin port, hardened, resources, credentials mounted read-only')
  t.notOk((container.volumeMounts as JsonObject[]).some((m) => m.subPath !== undefined), 'no subPath: rotated Secrets reach the files')
  const volumes = podSpec(deployment).volumes as JsonObject[]
  t.same(volumes.find((v) => v.name === 'store-auth-proxy-credentials'), {
    name: 'store-auth-proxy-credentials',
    secret: {
      secretName: expect.secretName,
      defaultMode: 292,
      items: [{ key: 'client_id', path: 'client_id' }, { key: 'client_secret', path: 'client_secret' }]
    }
  }, 'the credentials volume')
  return container
}
