{{/*
Expand the name of the chart.
*/}}
{{- define "store-auth-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
We truncate at 63 chars because some Kubernetes name fields are limited to this (by the DNS naming spec).
If release name contains chart name it will be used as a full name.
*/}}
{{- define "store-auth-proxy.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Create chart name and version as used by the chart label.
*/}}
{{- define "store-auth-proxy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels
*/}}
{{- define "store-auth-proxy.labels" -}}
helm.sh/chart: {{ include "store-auth-proxy.chart" . }}
{{ include "store-auth-proxy.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels
*/}}
{{- define "store-auth-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "store-auth-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Create the name of the service account to use
*/}}
{{- define "store-auth-proxy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "store-auth-proxy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image of the proxy (and of the example caller and stand-in, which it also contains).
*/}}
{{- define "store-auth-proxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/*
Annotations for the object that carries the sidecar (a Deployment's own metadata, where
each tool reads them), exempting it from the default checks of kube-linter, Polaris and
Checkov that its container trips by design. Each is a false positive or a documented
choice (chart README, "Security and admission"); Polaris takes only "true", so its reasons
are here:
- sensitiveContainerEnvVar (Polaris, danger: its admission webhook denies the pod) and
  env-var-secret (kube-linter) match variable names holding SECRET or TOKEN with a literal
  value: CLIENT_SECRET_FILE is a file path, TOKEN_*_MS are durations; the credentials
  reach the container only as mounted files.
- no CPU limit (kube-linter unset-cpu-requirements, Polaris cpuLimitsMissing, Checkov
  CKV_K8S_11): CFS throttling would add latency to every proxied call; the CPU request
  is set.
- pull policy (Checkov CKV_K8S_15), only when image.digest pins the image: IfNotPresent
  then pulls exactly that image.
- a secret through env (Checkov CKV_K8S_35), only for egressProxy.existingSecret: proxy
  settings are read from HTTPS_PROXY alone.
Checkov splits its value at "=": no "=" in a reason.
*/}}
{{- define "store-auth-proxy.admissionAnnotations" -}}
polaris.fairwinds.com/sensitiveContainerEnvVar-exempt: "true"
polaris.fairwinds.com/cpuLimitsMissing-exempt: "true"
ignore-check.kube-linter.io/env-var-secret: "store-auth-proxy: CLIENT_SECRET_FILE holds a file path; the credentials are mounted files, never env values"
ignore-check.kube-linter.io/unset-cpu-requirements: "store-auth-proxy: no CPU limit by design, CFS throttling would add latency to every proxied call; the CPU request is set"
checkov.io/skip1: "CKV_K8S_11=store-auth-proxy: no CPU limit by design, CFS throttling would add latency to every proxied call; the CPU request is set"
{{- if and .Values.image.digest (ne .Values.image.pullPolicy "Always") }}
checkov.io/skip2: "CKV_K8S_15=store-auth-proxy: the image is pinned by digest, so IfNotPresent pulls exactly that image"
{{- end }}
{{- if .Values.egressProxy.existingSecret.name }}
checkov.io/skip5: "CKV_K8S_35=store-auth-proxy: HTTPS_PROXY is read from the environment only; the Secret keeps its credentials out of the pod spec"
{{- end }}
{{- end }}

{{/*
The Secret holding the credentials: existingSecret, or the one this chart creates.
*/}}
{{- define "store-auth-proxy.secretName" -}}
{{- if .Values.credentials.existingSecret }}
{{- .Values.credentials.existingSecret }}
{{- else if and .Values.credentials.clientId .Values.credentials.clientSecret }}
{{- include "store-auth-proxy.fullname" . }}
{{- else }}
{{- fail "store-auth-proxy: set credentials.existingSecret, or both credentials.clientId and credentials.clientSecret" }}
{{- end }}
{{- end }}

{{/*
"true" when the sidecar is rendered as a native sidecar (an init container with
restartPolicy: Always); empty otherwise. Standalone mode runs the proxy as the pod's
only container, where restartPolicy is not allowed.
*/}}
{{- define "store-auth-proxy.native" -}}
{{- if and .Values.nativeSidecar (ne .Values.mode "standalone") }}true{{ end }}
{{- end }}

{{/*
HOST: loopback in a pod's sidecar, all addresses in standalone mode, unless set.
*/}}
{{- define "store-auth-proxy.host" -}}
{{- if .Values.proxy.host }}
{{- .Values.proxy.host }}
{{- else if eq .Values.mode "standalone" }}
{{- "0.0.0.0" }}
{{- else }}
{{- "127.0.0.1" }}
{{- end }}
{{- end }}

{{/*
The stand-in TI APIs' name (standIn.enabled), and the URL the proxy then uses for both APIs.
*/}}
{{- define "store-auth-proxy.standInName" -}}
{{- printf "%s-stand-in" (include "store-auth-proxy.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{/*
The stand-in's selector labels. The name is cut so that, with "-stand-in", it stays a valid
label value (63 characters at most) whatever nameOverride is.
*/}}
{{- define "store-auth-proxy.standInSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-stand-in" (include "store-auth-proxy.name" . | trunc 54 | trimSuffix "-") }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The name of the `helm test` pod, cut so that the suffix always fits in 63 characters.
*/}}
{{- define "store-auth-proxy.testName" -}}
{{- printf "%s-test-connection" (include "store-auth-proxy.fullname" . | trunc 47 | trimSuffix "-") }}
{{- end }}

{{/*
Fails the render when a Service name (the argument) is not a DNS-1035 label, which
Kubernetes requires of Services: a release name that starts with a digit or holds a dot.
*/}}
{{- define "store-auth-proxy.checkServiceName" -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" .) }}
{{- fail (printf "store-auth-proxy: %q is not a valid Service name (a lowercase letter first, then letters, digits and '-'); pick another release name or set fullnameOverride" .) }}
{{- end }}
{{- end }}

{{/*
Fails the render when the proxy would run as a native sidecar (an init container with
restartPolicy: Always) on a Kubernetes older than 1.29, where the pod would hang at start.
In the named sidecar template too, because parent charts include it directly. A context
built by hand (Helm without .Subcharts) must carry "Capabilities" for this check.
*/}}
{{- define "store-auth-proxy.checkNative" -}}
{{- if include "store-auth-proxy.native" . }}
{{- if not .Capabilities }}
{{- fail "store-auth-proxy: the context passed to store-auth-proxy.sidecar has no Capabilities, so the Kubernetes version cannot be checked for nativeSidecar; add \"Capabilities\" .Capabilities to it (see the chart README)" }}
{{- end }}
{{- if semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version }}
{{- fail (printf "store-auth-proxy: nativeSidecar needs Kubernetes >= 1.29 (this is %s); set nativeSidecar=false, or pass --kube-version to helm template" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Fails the render when the proxy port would listen beyond the pod in a sidecar topology:
with HOST on the pod's address, any pod of the cluster could call it and so use the
credentials. Only standalone mode (behind its NetworkPolicy) listens on all addresses.
*/}}
{{- define "store-auth-proxy.checkHost" -}}
{{- if and (ne .Values.mode "standalone") (not (regexMatch "^(127\\.[0-9.]+|::1|localhost)$" (include "store-auth-proxy.host" .))) }}
{{- fail (printf "store-auth-proxy: proxy.host=%s would let any pod of the cluster call the proxy, which is authenticated to TI as you; in mode %s it must be loopback (127.0.0.1, ::1 or empty): use mode=standalone with networkPolicy.clients to serve other pods" (include "store-auth-proxy.host" .) .Values.mode) }}
{{- end }}
{{- end }}

{{/*
Fails the render of a Deployment whose proxy would still be draining when the kubelet kills
it: SHUTDOWN_DELAY_MS + SHUTDOWN_GRACE_MS must end before terminationGracePeriodSeconds,
with one second left for the process to exit.
*/}}
{{- define "store-auth-proxy.checkShutdown" -}}
{{- $delay := include "store-auth-proxy.shutdownDelayMs" . | int64 }}
{{- $grace := .Values.proxy.shutdownGraceMs | int64 }}
{{- $period := mul (.Values.terminationGracePeriodSeconds | int64) 1000 }}
{{- if ge (add $delay $grace 1000) $period }}
{{- fail (printf "store-auth-proxy: proxy.shutdownDelayMs (%d) + proxy.shutdownGraceMs (%d) + 1000 ms to exit must stay below terminationGracePeriodSeconds (%d s), or the kubelet kills the proxy mid-drain; raise terminationGracePeriodSeconds or lower the two" $delay $grace (.Values.terminationGracePeriodSeconds | int64)) }}
{{- end }}
{{- end }}

{{/*
Fails the render of a Service that would publish the proxy's ports outside the cluster:
in standalone mode the proxy port is authenticated to TI as the credential holder; in
example mode the admin port carries /status (client id, URLs, rules).
*/}}
{{- define "store-auth-proxy.checkServiceType" -}}
{{- if ne .Values.service.type "ClusterIP" }}
{{- if eq .Values.mode "standalone" }}
{{- fail (printf "store-auth-proxy: service.type=%s would publish the proxy port, which is authenticated to TI as you, outside the cluster; keep ClusterIP (callers outside the cluster need a gateway that authenticates them first)" .Values.service.type) }}
{{- else }}
{{- fail (printf "store-auth-proxy: service.type=%s would publish the admin port and its /status outside the cluster; keep ClusterIP and use kubectl port-forward (chart README, \"Reaching the admin port\")" .Values.service.type) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "store-auth-proxy.standInUrl" -}}
{{- printf "http://%s:8081" (include "store-auth-proxy.standInName" .) }}
{{- end }}

{{/*
SHUTDOWN_DELAY_MS: proxy.shutdownDelayMs, or when it is null, what the topology needs: a
native sidecar is stopped only after the app containers have exited; a plain sidecar gets
SIGTERM together with the app, and a standalone proxy while Services still route to it.
*/}}
{{- define "store-auth-proxy.shutdownDelayMs" -}}
{{- if not (kindIs "invalid" .Values.proxy.shutdownDelayMs) }}
{{- .Values.proxy.shutdownDelayMs | int64 }}
{{- else if include "store-auth-proxy.native" . }}
{{- 0 }}
{{- else }}
{{- 5000 }}
{{- end }}
{{- end }}

{{/*
Pod annotations for any pod that runs the sidecar: a checksum of the rules file, which the
sidecar reads once, and the prometheus.io annotations for the admin port. Nothing derived
from the credentials: the sidecar re-reads their files before each token request, so a
changed Secret needs no restart, and a hash of the client secret in a pod annotation would
let anyone who may `get pods` test guesses offline.
*/}}
{{- define "store-auth-proxy.podAnnotations" -}}
{{- if .Values.rateLimits.rules }}
checksum/rate-limits: {{ include "store-auth-proxy.rateLimitsFile" . | sha256sum }}
{{- end }}
{{- if .Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.proxy.adminPort | int64 | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end }}

{{/*
The sidecar container, as one entry of a pod's `initContainers` (native sidecar) or
`containers` list. Its context is this chart's: from a parent chart that has this one
as a dependency, pass `(index .Subcharts "store-auth-proxy")`. See the chart README.
Numbers go through int64: Helm reads values as float64, which would print 3.6e+06.
*/}}
{{/*
The sidecar's env entries rendered from the chart's values (proxy.extraEnv comes after).
*/}}
{{- define "store-auth-proxy.env" -}}
- name: AUTH_URL
  value: {{ ternary (include "store-auth-proxy.standInUrl" .) .Values.proxy.authUrl .Values.standIn.enabled | quote }}
- name: UPSTREAM_URL
  value: {{ ternary (include "store-auth-proxy.standInUrl" .) .Values.proxy.upstreamUrl .Values.standIn.enabled | quote }}
- name: CLIENT_ID_FILE
  value: {{ printf "%s/%s" .Values.credentials.mountPath .Values.credentials.clientIdKey | quote }}
- name: CLIENT_SECRET_FILE
  value: {{ printf "%s/%s" .Values.credentials.mountPath .Values.credentials.clientSecretKey | quote }}
- name: HOST
  value: {{ include "store-auth-proxy.host" . | quote }}
- name: PORT
  value: {{ .Values.proxy.port | int64 | quote }}
- name: ADMIN_HOST
  value: {{ .Values.proxy.adminHost | quote }}
- name: ADMIN_PORT
  value: {{ .Values.proxy.adminPort | int64 | quote }}
- name: STATUS_ENDPOINT
  value: {{ .Values.proxy.statusEndpoint | quote }}
- name: STATUS_FROM
  value: {{ .Values.proxy.statusFrom | quote }}
- name: TOKEN_TIMEOUT_MS
  value: {{ .Values.proxy.tokenTimeoutMs | int64 | quote }}
- name: UPSTREAM_TIMEOUT_MS
  value: {{ .Values.proxy.upstreamTimeoutMs | int64 | quote }}
- name: TOKEN_REFRESH_MARGIN_MS
  value: {{ .Values.proxy.tokenRefreshMarginMs | int64 | quote }}
- name: TOKEN_WAIT_MS
  value: {{ .Values.proxy.tokenWaitMs | int64 | quote }}
- name: SHUTDOWN_GRACE_MS
  value: {{ .Values.proxy.shutdownGraceMs | int64 | quote }}
- name: SHUTDOWN_DELAY_MS
  value: {{ include "store-auth-proxy.shutdownDelayMs" . | quote }}
- name: MAX_HEADER_BYTES
  value: {{ .Values.proxy.maxHeaderBytes | int64 | quote }}
- name: MAX_BODY_BYTES
  value: {{ .Values.proxy.maxBodyBytes | int64 | quote }}
- name: HEADERS_TIMEOUT_MS
  value: {{ .Values.proxy.headersTimeoutMs | int64 | quote }}
- name: REQUEST_TIMEOUT_MS
  value: {{ .Values.proxy.requestTimeoutMs | int64 | quote }}
- name: KEEP_ALIVE_TIMEOUT_MS
  value: {{ .Values.proxy.keepAliveTimeoutMs | int64 | quote }}
- name: IDLE_TIMEOUT_MS
  value: {{ .Values.proxy.idleTimeoutMs | int64 | quote }}
- name: ACCESS_LOG
  value: {{ .Values.proxy.accessLog | quote }}
- name: LOG_LEVEL
  value: {{ .Values.proxy.logLevel | quote }}
{{- with include "store-auth-proxy.egressProxyEnv" . | trim }}
{{ . }}
{{- end }}
{{- with include "store-auth-proxy.rateLimitsEnv" . | trim }}
{{ . }}
{{- end }}
{{- with include "store-auth-proxy.ordersEnv" . | trim }}
{{ . }}
{{- end }}
{{- with include "store-auth-proxy.tracingEnv" . | trim }}
{{ . }}
{{- end }}
{{- end }}

{{/*
OpenTelemetry's variables (docs/tracing.md), only with an endpoint: without one the sidecar
loads none of it, and none is rendered.
*/}}
{{- define "store-auth-proxy.tracingEnv" -}}
{{- with .Values.tracing }}
{{- if .endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .endpoint | quote }}
{{- with .protocol }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ . | quote }}
{{- end }}
{{- with .serviceName }}
- name: OTEL_SERVICE_NAME
  value: {{ . | quote }}
{{- end }}
{{- with .sampler }}
- name: OTEL_TRACES_SAMPLER
  value: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" .samplerArg) }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .samplerArg | toString | quote }}
{{- end }}
{{- with .resourceAttributes }}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- /* The variable's values are percent-encoded (the sidecar decodes them): a % or a comma stays itself. */}}
{{- $pairs = append $pairs (printf "%s=%s" $key ($value | replace "%" "%25" | replace "," "%2C")) }}
{{- end }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ join "," $pairs | quote }}
{{- end }}
{{- if not (kindIs "invalid" .propagateUpstream) }}
- name: OTEL_PROPAGATE_UPSTREAM
  value: {{ .propagateUpstream | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The route policy, test orders and the state directory (docs/idempotency.md): only what is set.
*/}}
{{- define "store-auth-proxy.ordersEnv" -}}
{{- with .Values.orders.allowedRoutes }}
- name: ALLOWED_ROUTES
  value: {{ join "; " . | quote }}
{{- end }}
{{- if .Values.orders.testOrders }}
- name: TEST_ORDERS
  value: "true"
{{- end }}
{{- if .Values.orders.stateDir.enabled }}
- name: STATE_DIR
  value: {{ .Values.orders.stateDir.mountPath | quote }}
{{- end }}
{{- end }}

{{- define "store-auth-proxy.sidecar" -}}
{{- include "store-auth-proxy.checkNative" . -}}
{{- include "store-auth-proxy.checkHost" . -}}
{{- include "store-auth-proxy.checkEgressProxy" . -}}
{{- include "store-auth-proxy.checkCache" . -}}
- name: store-auth-proxy
  image: {{ include "store-auth-proxy.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if include "store-auth-proxy.native" . }}
  # A native sidecar: started before the app containers, stopped after them.
  restartPolicy: Always
  {{- end }}
  args: ["serve"]
  env:
    {{- $env := include "store-auth-proxy.env" . }}
    {{- range .Values.proxy.extraEnv }}
    {{- if regexMatch (printf "(?m)^- name: %s$" (regexQuoteMeta .name)) $env }}
    {{- fail (printf "store-auth-proxy: proxy.extraEnv sets %s, which the chart already renders from its values; set that value instead (a second entry would silently override it and its checks)" .name) }}
    {{- end }}
    {{- if has .name (list "CLIENT_ID" "CLIENT_SECRET" "RATE_LIMIT_REDIS_URL") }}
    {{- fail (printf "store-auth-proxy: proxy.extraEnv sets %s, a secret as an env value; the chart mounts the credentials and the Redis URL as files" .name) }}
    {{- end }}
    {{- end }}
    {{- $env | nindent 4 }}
    {{- with .Values.proxy.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    {{- if eq .Values.mode "standalone" }}
    - name: authproxy
      containerPort: {{ .Values.proxy.port | int64 }}
      protocol: TCP
    {{- end }}
    - name: authproxy-admin
      containerPort: {{ .Values.proxy.adminPort | int64 }}
      protocol: TCP
  livenessProbe:
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  readinessProbe:
    {{- toYaml .Values.readinessProbe | nindent 4 }}
  startupProbe:
    {{- toYaml .Values.startupProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    # The whole directory, never subPath: the kubelet then updates the files when the
    # Secret changes, and the proxy re-reads them before each token request.
    - name: store-auth-proxy-credentials
      mountPath: {{ .Values.credentials.mountPath }}
      readOnly: true
    {{- if .Values.rateLimits.rules }}
    - name: store-auth-proxy-rate-limits
      mountPath: {{ .Values.rateLimits.mountPath }}
      readOnly: true
    {{- if .Values.rateLimits.stateDir }}
    - name: store-auth-proxy-state
      mountPath: {{ .Values.rateLimits.stateDir }}
    {{- end }}
    {{- end }}
    {{- if .Values.rateLimits.redis.existingSecret }}
    - name: store-auth-proxy-rate-limit-redis
      mountPath: {{ .Values.rateLimits.redis.mountPath }}
      readOnly: true
    {{- end }}
    {{- if .Values.orders.stateDir.enabled }}
    - name: store-auth-proxy-state
      mountPath: {{ .Values.orders.stateDir.mountPath }}
    {{- end }}
{{- end }}

{{/*
The sidecar's volumes, as entries of a pod's `volumes` list.
*/}}
{{- define "store-auth-proxy.volumes" -}}
- name: store-auth-proxy-credentials
  secret:
    secretName: {{ include "store-auth-proxy.secretName" . }}
    # 0444, written in decimal (YAML 1.1 and 1.2 read 0444 differently): readable by the
    # proxy's uid without a pod-level fsGroup (the pod may not be ours); only the proxy
    # container mounts this volume.
    defaultMode: 292
    items:
      - key: {{ .Values.credentials.clientIdKey }}
        path: {{ .Values.credentials.clientIdKey }}
      - key: {{ .Values.credentials.clientSecretKey }}
        path: {{ .Values.credentials.clientSecretKey }}
{{- if .Values.rateLimits.rules }}
- name: store-auth-proxy-rate-limits
  configMap:
    name: {{ include "store-auth-proxy.rateLimitsName" . }}
    defaultMode: 292
    items:
      - key: rules
        path: rules
{{- if .Values.rateLimits.stateDir }}
# STATE_DIR: outlives a restart of the container, not the pod (docs/quota-guard.md).
- name: store-auth-proxy-state
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
{{- end }}
{{- if .Values.rateLimits.redis.existingSecret }}
- name: store-auth-proxy-rate-limit-redis
  secret:
    secretName: {{ .Values.rateLimits.redis.existingSecret }}
    # 0444 (see above): the URL may carry a password; only the proxy container mounts it.
    defaultMode: 292
    items:
      - key: {{ .Values.rateLimits.redis.key }}
        path: {{ .Values.rateLimits.redis.key }}
{{- end }}
{{- if .Values.orders.stateDir.enabled }}
# Idempotency keys outlive a crash of the sidecar container (the pod's life, not its deletion).
- name: store-auth-proxy-state
  emptyDir:
    sizeLimit: {{ .Values.orders.stateDir.sizeLimit }}
{{- end }}
{{- end }}

{{/*
The quota guard's ConfigMap (rateLimits.rules), named so that the suffix always fits.
*/}}
{{- define "store-auth-proxy.rateLimitsName" -}}
{{- printf "%s-rate-limits" (include "store-auth-proxy.fullname" . | trunc 51 | trimSuffix "-") }}
{{- end }}

{{/*
The rules file (key `rules` of the ConfigMap) RATE_LIMITS_FILE points to: one rule per line, in the order given (the
first matching rule wins). Its checksum rolls the pods when the rules change, since the
sidecar reads the file once, at start.
*/}}
{{- define "store-auth-proxy.rateLimitsFile" -}}
# store-auth-proxy quota rules (the chart's rateLimits.rules): METHOD PATH N/WINDOW [N/WINDOW ...] [cache=DURATION [stale=DURATION]]
{{- range .Values.rateLimits.rules }}
{{ . }}
{{- end }}
{{- end }}

{{/*
The quota guard's environment variables: only those whose value is set, so that with
rateLimits left empty the sidecar runs its embedded defaults and the render is unchanged.
*/}}
{{- define "store-auth-proxy.rateLimitsEnv" -}}
{{- if .Values.rateLimits.rules }}
- name: RATE_LIMITS_FILE
  value: {{ printf "%s/rules" .Values.rateLimits.mountPath | quote }}
{{- with .Values.rateLimits.stateDir }}
- name: STATE_DIR
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.maxWaitMs) }}
- name: RATE_LIMIT_MAX_WAIT_MS
  value: {{ .Values.rateLimits.maxWaitMs | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.cooldownMs) }}
- name: RATE_LIMIT_COOLDOWN_MS
  value: {{ .Values.rateLimits.cooldownMs | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.cooldownMaxMs) }}
- name: RATE_LIMIT_COOLDOWN_MAX_MS
  value: {{ .Values.rateLimits.cooldownMaxMs | int64 | quote }}
{{- end }}
{{- if not .Values.rateLimits.headers }}
- name: RATE_LIMIT_HEADERS
  value: "false"
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.fleetSize) }}
- name: RATE_LIMIT_FLEET_SIZE
  value: {{ .Values.rateLimits.fleetSize | int64 | quote }}
{{- else if and .Values.rateLimits.redis.existingSecret (ne .Values.mode "sidecar") }}
# The chart's own Deployment: its replicas plus the rolling update's default surge (25%, rounded up).
- name: RATE_LIMIT_FLEET_SIZE
  value: {{ $replicas := .Values.replicaCount | int64 }}{{ add $replicas (div (add $replicas 3) 4) | max 1 | quote }}
{{- end }}
{{- if .Values.rateLimits.redis.existingSecret }}
- name: RATE_LIMIT_REDIS_URL_FILE
  value: {{ printf "%s/%s" .Values.rateLimits.redis.mountPath .Values.rateLimits.redis.key | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.redis.timeoutMs) }}
- name: RATE_LIMIT_REDIS_TIMEOUT_MS
  value: {{ .Values.rateLimits.redis.timeoutMs | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.redis.aloneMaxMs) }}
- name: RATE_LIMIT_ALONE_MAX_MS
  value: {{ .Values.rateLimits.redis.aloneMaxMs | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.cache.maxBytes) }}
- name: CACHE_MAX_BYTES
  value: {{ .Values.rateLimits.cache.maxBytes | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.cache.entryMaxBytes) }}
- name: CACHE_ENTRY_MAX_BYTES
  value: {{ .Values.rateLimits.cache.entryMaxBytes | int64 | quote }}
{{- end }}
{{- if not (kindIs "invalid" .Values.rateLimits.cache.redisMaxBytes) }}
- name: CACHE_REDIS_MAX_BYTES
  value: {{ .Values.rateLimits.cache.redisMaxBytes | int64 | quote }}
{{- end }}
{{- end }}

{{/*
Fails the render when the read cache's largest entry exceeds the whole cache, which the
sidecar refuses at start (it would crash-loop): rateLimits.cache.entryMaxBytes against
maxBytes, each null meaning the sidecar's default (8 MiB, 32 MiB).
*/}}
{{- define "store-auth-proxy.checkCache" -}}
{{- $max := .Values.rateLimits.cache.maxBytes | default 33554432 | int64 }}
{{- $entry := .Values.rateLimits.cache.entryMaxBytes | default 8388608 | int64 }}
{{- if gt $entry $max }}
{{- fail (printf "store-auth-proxy: rateLimits.cache.entryMaxBytes (%d) exceeds rateLimits.cache.maxBytes (%d; null means the sidecar's defaults, 8388608 and 33554432), which the sidecar refuses at start; lower entryMaxBytes or raise maxBytes" $entry $max) }}
{{- end }}
{{- end }}


{{/*
The NetworkPolicy ingress rule for the sidecar's admin port: networkPolicy.adminFrom and
the chart's own `helm test` pod. The chart's policy uses it in example and standalone
modes; in sidecar mode include it in your own pod's NetworkPolicy (chart README,
"Reaching the admin port"), with the same context as store-auth-proxy.sidecar.
*/}}
{{- define "store-auth-proxy.adminIngress" -}}
- ports:
    - port: authproxy-admin
      protocol: TCP
  from:
    {{- with .Values.networkPolicy.adminFrom }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    # The chart's own `helm test` pod, which checks /readyz through the Service.
    - podSelector:
        matchLabels:
          app.kubernetes.io/instance: {{ .Release.Name }}
          app.kubernetes.io/component: test
{{- end }}

{{/*
Fails the render of an egress proxy URL that would put credentials in a plain env value
(readable by anyone who may `get pods`), or that is set twice.
*/}}
{{- define "store-auth-proxy.checkEgressProxy" -}}
{{- with .Values.egressProxy }}
{{- if contains "@" .url }}
{{- fail "store-auth-proxy: egressProxy.url carries credentials (user:password@), which would show in the pod spec; put the URL in a Secret and set egressProxy.existingSecret.name and .key" }}
{{- end }}
{{- if and .url .existingSecret.name }}
{{- fail "store-auth-proxy: set egressProxy.url or egressProxy.existingSecret, not both" }}
{{- end }}
{{- if and .existingSecret.name (not .existingSecret.key) }}
{{- fail "store-auth-proxy: egressProxy.existingSecret.key is empty: name the key holding the proxy URL in the Secret" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
HTTPS_PROXY and NO_PROXY when egressProxy is set. NO_PROXY always holds the addresses the
sidecar reaches directly: its own loopback and, with the stand-in, the stand-in's Service.
*/}}
{{- define "store-auth-proxy.egressProxyEnv" -}}
{{- with .Values.egressProxy }}
{{- if or .url .existingSecret.name }}
- name: HTTPS_PROXY
  {{- if .url }}
  value: {{ .url | quote }}
  {{- else }}
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret.name }}
      key: {{ .existingSecret.key }}
  {{- end }}
{{- $direct := list "localhost" "127.0.0.1" "::1" }}
{{- if $.Values.standIn.enabled }}
{{- $direct = append $direct (include "store-auth-proxy.standInName" $) }}
{{- end }}
- name: NO_PROXY
  value: {{ concat $direct .noProxy | uniq | join "," | quote }}
{{- end }}
{{- end }}
{{- end }}
