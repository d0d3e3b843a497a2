#!/usr/bin/env bash
# The container checks of the Dockerfile and docker-compose.yml, run for real with podman:
#
#   bash test/deploy/containers.sh
#
# 1. builds the image (`podman build --pull=never`, on the local stand-ins for the base
#    images that ../shared/tools/local-node-image.sh makes);
# 2. runs the sidecar from it with a read-only root filesystem (no tmpfs either), all
#    capabilities dropped and no-new-privileges, against the stand-in TI APIs run from
#    the same image, and checks: ready, the image HEALTHCHECK passes, a proxied store
#    call works (with the token it injected: the API itself answers 401 without one),
#    the proxy process runs as a non-root uid with no capabilities, and `podman stop`
#    returns within STOP_LIMIT_S with exit code 0;
# 3. brings docker-compose.yml up with podman-compose, waits until the example caller's
#    requests succeed through the sidecar (its metrics on 127.0.0.1 count proxied 2xx
#    answers), checks the healthchecks, the hardening and that the sidecar is reachable
#    only from the caller's namespace, stops it (every container must exit 0) and tears
#    it down;
# 4. brings up the compose profile `fleet` (a Redis, from a local stand-in for the official
#    image that test/deploy/local-redis-image.sh builds, and two caller + sidecar pairs) and
#    checks: both sidecars ready, /status of each says backend redis (the URL shown without
#    its password), the catalog budget spent through one sidecar is refused by the other
#    with an exact Retry-After, the password appears in no log or admin answer, Redis runs
#    hardened as its own non-root user; then stops it (exit 0) and tears it down.
# 5. brings up the compose profile `egress` (a tinyproxy with Basic authentication, built
#    from deploy/egress-proxy/, a caller + sidecar pair with HTTPS_PROXY / HTTP_PROXY set,
#    and a stand-in TI only the proxy reaches) and checks: the sidecar gets its token and
#    a store call answers 200, each through the proxy (its log has both URLs), TI does not
#    even resolve from the pair's namespace, the proxy refuses a request without credentials
#    (407), the proxy's password is in no log or admin answer, the proxy runs hardened as
#    nobody; then stops it (exit 0) and tears it down.
#
# podman-compose 1.0.3 ignores compose `profiles`, so each `up` names its services; the
# default `up` is checked to start exactly the three services of old.
#
# Needs root (podman-setup.sh installs podman, runc and podman-compose from Debian).
# Skips, exiting 0, only where podman cannot run at all. Everything it starts is named
# after this run (sap<pid>) and removed at the end; traffic stays on this machine's
# loopback and podman's own networks.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
# CI clones the repository with shared/ beside it; so does a developer's machine.
tools=${SHARED_TOOLS:-$repo/../shared/tools}
STOP_LIMIT_S=${STOP_LIMIT_S:-5}
READY_TIMEOUT_S=${READY_TIMEOUT_S:-60}
run=sap$$
started=$(date +%s)
# Docker image format for every build, podman-compose's included: the OCI format has no
# HEALTHCHECK, and one format lets the compose build reuse the layers of the first build.
export BUILDAH_FORMAT=docker

if [ ! -x "$tools/podman-setup.sh" ] || [ ! -x "$tools/local-node-image.sh" ]; then
  echo "containers: $tools/podman-setup.sh and local-node-image.sh are missing." >&2
  echo "containers: shared/ must sit beside the repository (../shared/tools), or set SHARED_TOOLS." >&2
  exit 1
fi

# podman's healthcheck timers need systemd, which these machines do not run: every
# `podman run` of an image with a HEALTHCHECK logs that it could not add them. Healthchecks
# are run explicitly below (`podman healthcheck run`), so that noise is dropped.
quiet_podman () {
  podman "$@" 2> >(grep -v -e 'systemd' -e 'failed to connect to syslog' >&2)
}

passed=0 failed=0
ok () { passed=$((passed + 1)); echo "ok - $*"; }
not_ok () { failed=$((failed + 1)); echo "not ok - $*"; }
check () { # check "description" command...
  local what=$1; shift
  if "$@"; then ok "$what"; else not_ok "$what"; fi
}
elapsed () { echo $(( $(date +%s) - started ))s; }
eq () { [ "$1" = "$2" ]; }
has () { [[ $1 == *"$2"* ]]; }
# grep reads everything (no -q): with pipefail, grep -q's early exit would fail the
# pipeline on podman's SIGPIPE whenever the logs are longer than one pipe buffer.
logs_have () { podman logs "$1" 2>/dev/null | grep -F -- "$2" >/dev/null; }
# Proxied GETs answered 2xx, from metrics text on stdin, whatever other labels the series has.
gets_2xx () {
  awk '/^store_auth_proxy_requests_total\{/ && /method="GET"/ && /status_class="2xx"/ { n += $NF } END { print n + 0 }'
}
# The container's node process, seen from this machine: PID 1, or the child of the init.
node_pid () {
  local pid child
  pid=$(podman inspect --format '{{.State.Pid}}' "$1")
  child=$(pgrep -P "$pid" | head -1 || true)
  echo "${child:-$pid}"
}

# --- can podman run here at all? --------------------------------------------------------
if ! "$tools/podman-setup.sh"; then
  if ! command -v podman >/dev/null || ! podman info >/dev/null 2>&1; then
    echo "containers: SKIPPED: podman cannot be installed or run on this machine (podman-setup.sh failed)."
    exit 0
  fi
  echo "containers: podman-setup.sh failed, but podman runs: going on" >&2
fi
command -v podman-compose >/dev/null || { echo "containers: podman-compose is missing after podman-setup.sh" >&2; exit 1; }

"$tools/local-node-image.sh" slim 24
"$tools/local-node-image.sh" distroless 24
bash "$repo/test/deploy/local-redis-image.sh"

# --- cleanup, whatever happens ----------------------------------------------------------
compose=(podman-compose --podman-path "$repo/test/deploy/podman-compat.py" -p "$run")
show_logs_on_failure () {
  [ "$failed" -gt 0 ] || [ -n "${aborted:-}" ] || return 0
  local c
  for c in "$@"; do
    podman container exists "$c" 2>/dev/null && { echo "--- last logs of $c"; podman logs "$c" 2>&1 | tail -20; }
  done
  return 0
}
cleanup () {
  set +e
  show_logs_on_failure "$run-stand-in" "$run-proxy" "${run}_stand-in_1" "${run}_caller_1" "${run}_store-auth-proxy_1" \
    "${run}_redis_1" "${run}_fleet-sidecar-a_1" "${run}_fleet-sidecar-b_1" "${run}_egress-proxy_1" "${run}_egress-sidecar_1"
  podman rm -f -t 0 "$run-stand-in" "$run-proxy" >/dev/null 2>&1
  podman network rm -f "$run-net" >/dev/null 2>&1
  # podman-compose 1.0.3's down takes tens of seconds even with nothing left to remove.
  if [ -n "$(podman ps -a -q --filter "label=com.docker.compose.project=$run" 2>/dev/null)" ]; then
    "${compose[@]}" down >/dev/null 2>&1
  fi
  podman network rm -f "${run}_default" "${run}_fleet-redis" "${run}_egress-ti" >/dev/null 2>&1
}
trap 'aborted=1' ERR
trap 'aborted=1; exit 130' INT TERM
trap cleanup EXIT

wait_for () { # wait_for seconds command...: retries every 0.5 s
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

# --- 1. build ---------------------------------------------------------------------------
echo "== build ($(elapsed))"
t0=$(date +%s%N)
version=$(node -p 'require("./package.json").version')
revision=ci-$run
base_digest=$(podman image inspect --format '{{.Digest}}' gcr.io/distroless/nodejs24-debian12:nonroot)
podman build --pull=never --format docker --build-arg REVISION="$revision" --build-arg RUNTIME_BASE_DIGEST="$base_digest" \
  -t store-auth-proxy:test . >"/tmp/$run-build.log" 2>&1 \
  || { tail -40 "/tmp/$run-build.log"; echo "containers: the image did not build" >&2; exit 1; }
image=$(podman image inspect --format '{{.Id}}' store-auth-proxy:test)
echo "built ${image:0:12} in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
rm -f "/tmp/$run-build.log"
base=$(podman image inspect --format '{{.Id}}' gcr.io/distroless/nodejs24-debian12:nonroot)
echo "layers added to the runtime base (bytes):"
podman image history --format '{{.ID}} {{.Size}} {{.CreatedBy}}' "$image" \
  | awk -v base="${base:0:12}" '$1 == base { exit } { print "  " substr($0, 1, 110) }'
echo "image size: $(podman image inspect --format '{{.Size}}' "$image") bytes, base: $(podman image inspect --format '{{.Size}}' "$base") bytes"

inspect () { podman image inspect --format "$1" "$image"; }
check "image runs as a numeric non-root user" eq "$(inspect '{{.Config.User}}')" 65532:65532
ports=$(inspect '{{json .Config.ExposedPorts}}')
check "image exposes 8080 and 9090" eq "$ports" '{"8080/tcp":{},"9090/tcp":{}}'
check "image entrypoint runs node directly, exec form" \
  eq "$(inspect '{{json .Config.Entrypoint}}')" '["/nodejs/bin/node","--max-semi-space-size=4","/app/dist/bundle/main.js"]'
check "image HEALTHCHECK is exec form (no shell)" \
  eq "$(inspect '{{json .Config.Healthcheck.Test}}')" '["CMD","/nodejs/bin/node","/app/dist/main.js","healthcheck"]'
labels=$(inspect '{{json .Config.Labels}}')
for label in title description version revision licenses source created base.name base.digest; do
  check "image carries the OCI label org.opencontainers.image.$label" has "$labels" "\"org.opencontainers.image.$label\""
done
check "the version label is package.json's ($version)" eq "$(inspect '{{index .Config.Labels "org.opencontainers.image.version"}}')" "$version"
check "the revision label is the REVISION build argument" eq "$(inspect '{{index .Config.Labels "org.opencontainers.image.revision"}}')" "$revision"
check "the base.name label is the runtime base" \
  eq "$(inspect '{{index .Config.Labels "org.opencontainers.image.base.name"}}')" gcr.io/distroless/nodejs24-debian12:nonroot
check "the base.digest label is the RUNTIME_BASE_DIGEST build argument ($base_digest)" \
  eq "$(inspect '{{index .Config.Labels "org.opencontainers.image.base.digest"}}')" "$base_digest"
said=$(quiet_podman run --rm "$image" --version)
check "--version in the image says the version, the build's revision and node 24 (got: $said)" \
  has "$said" "store-auth-proxy $version (revision $revision, node v24."
check "--help in the image lists the commands and exits 0" has "$(quiet_podman run --rm "$image" --help)" '  healthcheck [URL]'
if refused=$(podman build --pull=never --format docker --build-arg VERSION=0.0.0-not-this -t "$run-wrong-version" . 2>&1); then
  not_ok "the build refuses a VERSION build argument other than package.json's"
  podman rmi -f "$run-wrong-version" >/dev/null 2>&1
else
  check "the build refuses a VERSION build argument other than package.json's, saying why" \
    has "$refused" "VERSION=0.0.0-not-this is not package.json version $version"
fi

# --- 2. the sidecar, read-only and without capabilities, against the stand-in -----------
echo "== podman run ($(elapsed))"
hardened=(--read-only --read-only-tmpfs=false --cap-drop=ALL --security-opt=no-new-privileges)
secrets=(-v "$repo/deploy/demo-secrets/client_id:/run/secrets/client_id:ro"
         -v "$repo/deploy/demo-secrets/client_secret:/run/secrets/client_secret:ro")
podman network create "$run-net" >/dev/null
quiet_podman run -d --name "$run-stand-in" --network "$run-net" "${hardened[@]}" "${secrets[@]}" \
  -e STAND_IN_HOST=0.0.0.0 -e STAND_IN_CLIENT_SECRET_FILE=/run/secrets/client_secret \
  "$image" stand-in >/dev/null
# HOST=0.0.0.0: reached from this machine through a published port, not from a shared
# namespace. Both ports are published on loopback only, on ports the kernel picks.
quiet_podman run -d --name "$run-proxy" --network "$run-net" "${hardened[@]}" "${secrets[@]}" \
  -e HOST=0.0.0.0 -e AUTH_URL="http://$run-stand-in:8081" -e UPSTREAM_URL="http://$run-stand-in:8081" \
  -e CLIENT_ID_FILE=/run/secrets/client_id -e CLIENT_SECRET_FILE=/run/secrets/client_secret \
  -p 127.0.0.1::8080 -p 127.0.0.1::9090 "$image" >/dev/null
proxy_port=$(podman port "$run-proxy" 8080/tcp | sed 's/.*://')
admin_port=$(podman port "$run-proxy" 9090/tcp | sed 's/.*://')

ready () { curl -sf "http://127.0.0.1:$admin_port/readyz" >/dev/null; }
check "the sidecar becomes ready (admin /readyz 200)" wait_for "$READY_TIMEOUT_S" ready
check "the image HEALTHCHECK passes (podman healthcheck run)" quiet_podman healthcheck run "$run-proxy"
said=$(podman exec "$run-proxy" /nodejs/bin/node /app/dist/main.js healthcheck 2>&1)
check "healthcheck says what answered (got: $said)" eq "$said" "healthy: http://127.0.0.1:9090/readyz answered 200"
said=$(podman exec "$run-proxy" /nodejs/bin/node /app/dist/main.js healthcheck http://127.0.0.1:1/readyz 2>&1 || true)
check "healthcheck says what failed (got: $said)" has "$said" "not healthy: http://127.0.0.1:1/readyz refused the connection"
check "the start-up log line carries the version and revision" logs_have "$run-proxy" "\"version\":\"$version\",\"revision\":\"$revision\",\"node\":\"v24."
answer=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$proxy_port/v2/store/products/LM358BIDR?currency=USD")
check "a store call through the sidecar answers 200 (got ${answer##* })" eq "${answer##* }" 200
check "... with the product from the store API" has "$answer" '"tiPartNumber":"LM358BIDR"'
# The same path straight to the stand-in, from inside its container, without a token.
direct=$(podman exec "$run-stand-in" /nodejs/bin/node -e \
  "fetch('http://127.0.0.1:8081/v2/store/products/LM358BIDR').then(r => console.log(r.status))")
check "the API itself refuses the call without the injected token (401, got $direct)" eq "$direct" 401
metrics_text=$(curl -s "http://127.0.0.1:$admin_port/metrics")
check "metrics count the proxied 2xx answer" eq "$(gets_2xx <<<"$metrics_text")" 1
check "metrics carry store_auth_proxy_build_info with the version and revision" \
  has "$metrics_text" "store_auth_proxy_build_info{version=\"$version\",revision=\"$revision\",node=\"v24."
check "the runtime metrics are unprefixed (process_*, nodejs_*)" has "$metrics_text" $'\nprocess_resident_memory_bytes '

pid=$(node_pid "$run-proxy")
uids=$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")
check "the proxy process runs as uid 65532, not 0 (real/effective/saved/fs: $uids)" eq "$uids" "65532 65532 65532 65532"
check "the proxy process has no capabilities" grep -q '^CapEff:[[:space:]]*0000000000000000$' "/proc/$pid/status"
check "the proxy process cannot gain privileges" grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$pid/status"

t0=$(date +%s%N)
podman stop -t 10 "$run-proxy" >/dev/null 2>&1
stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
code=$(podman inspect --format '{{.State.ExitCode}}' "$run-proxy")
check "podman stop returns in ${stop_ms} ms (limit ${STOP_LIMIT_S} s)" test "$stop_ms" -lt $(( STOP_LIMIT_S * 1000 ))
check "the sidecar exits 0 on SIGTERM (got $code)" eq "$code" 0
check "the sidecar logged a graceful stop" logs_have "$run-proxy" '"msg":"stopped"'
show_logs_on_failure "$run-stand-in" "$run-proxy"
podman rm -f -t 0 "$run-stand-in" "$run-proxy" >/dev/null 2>&1
podman network rm -f "$run-net" >/dev/null

# --- 3. docker-compose.yml with podman-compose --------------------------------------------
echo "== podman-compose ($(elapsed))"
# 127.0.0.1:9090 may be taken by a developer's demo: let the kernel pick the host port.
STORE_AUTH_PROXY_ADMIN_PORT=$(node -e "const s = require('node:net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close() })")
export STORE_AUTH_PROXY_ADMIN_PORT
# --build: never test an image left over from another checkout (every layer is cached).
t0=$(date +%s%N)
# The default services by name: podman-compose 1.0.3 would start the `fleet` profile too.
default_services=(stand-in caller store-auth-proxy)
"${compose[@]}" up -d --build "${default_services[@]}" >"/tmp/$run-compose.log" 2>&1 \
  || { grep -v systemd "/tmp/$run-compose.log" | tail -40; not_ok "podman-compose up"; exit 1; }
rm -f "/tmp/$run-compose.log"
echo "podman-compose up -d --build took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
sidecar="${run}_store-auth-proxy_1" caller="${run}_caller_1" stand_in="${run}_stand-in_1"
check "without the profile, the services are on the default network only" \
  eq "$(podman inspect --format '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "${run}_caller_1")" "${run}_default "
check "without the profile, up starts the three services of old" \
  eq "$(podman ps -a --filter "label=com.docker.compose.project=$run" --format '{{.Names}}' | sort | paste -sd ' ')" \
  "${run}_caller_1 ${run}_stand-in_1 ${run}_store-auth-proxy_1"
metrics="http://127.0.0.1:$STORE_AUTH_PROXY_ADMIN_PORT/metrics"

# Two answers: the caller's loop keeps going once the sidecar holds its token.
twice_2xx () {
  local n
  n=$(curl -s "$metrics" | gets_2xx)
  [ "${n:-0}" -ge 2 ]
}
check "the caller's requests succeed through the sidecar (metrics on 127.0.0.1:$STORE_AUTH_PROXY_ADMIN_PORT count 2xx)" \
  wait_for "$READY_TIMEOUT_S" twice_2xx
check "the caller logs the store API's answers" wait_for 10 logs_have "$caller" '"status":200,"tiPartNumber":"LM358BIDR"'
check "the sidecar reads its credentials from the compose secret files" \
  logs_have "$sidecar" '"clientIdFrom":"file /run/secrets/client_id","clientSecretFrom":"file /run/secrets/client_secret"'
for c in "$stand_in" "$caller" "$sidecar"; do
  check "healthcheck of ${c#"${run}"_} passes" quiet_podman healthcheck run "$c"
  check "${c#"${run}"_} runs with init, a read-only root filesystem and no capabilities" \
    eq "$(podman inspect --format '{{.HostConfig.Init}} {{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}}' "$c")" "true true []"
  pid=$(node_pid "$c")
  check "${c#"${run}"_} runs as uid 65532 and cannot gain privileges" \
    eq "$(awk '/^Uid:/ { print $3 } /^NoNewPrivs:/ { print $2 }' "/proc/$pid/status" | paste -sd ' ')" "65532 1"
done
# HOST stays 127.0.0.1 in the shared namespace: a neighbour on the compose network
# cannot use the sidecar (and so the credentials); only the caller can.
from_neighbour=$(podman exec "$stand_in" /nodejs/bin/node -e \
  "fetch('http://caller:8080/v2/store/products/LM358BIDR').then(r => console.log(r.status), e => console.log(e.cause?.code ?? e.message))")
check "the sidecar is not reachable from another container (got $from_neighbour)" eq "$from_neighbour" ECONNREFUSED

t0=$(date +%s%N)
"${compose[@]}" stop >/dev/null 2>&1
echo "podman-compose stop took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
for c in "$stand_in" "$caller" "$sidecar"; do
  code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
  check "${c#"${run}"_} exits 0 on stop (got $code)" eq "$code" 0
done
show_logs_on_failure "$stand_in" "$caller" "$sidecar"
"${compose[@]}" down >/dev/null 2>&1
podman network rm -f "${run}_default" >/dev/null 2>&1 || true
check "podman-compose down removes every container" \
  test -z "$(podman ps -a --filter "label=com.docker.compose.project=$run" --format '{{.Names}}')"

# stop_profile NAME NETWORK CONTAINER...: stops a profile's containers (each must exit 0),
# then takes the project down with the profile's own network.
stop_profile () {
  local name=$1 network=$2 c code; shift 2
  t0=$(date +%s%N)
  podman stop -t 10 "$@" >/dev/null 2>&1
  echo "stopping the $name profile took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  for c in "$@"; do
    code=$(podman inspect --format '{{.State.ExitCode}}' "$c")
    check "${c#"${run}"_} exits 0 on stop (got $code)" eq "$code" 0
  done
  show_logs_on_failure "$@"
  "${compose[@]}" down >/dev/null 2>&1
  podman network rm -f "${run}_default" "${run}_$network" >/dev/null 2>&1 || true
  check "podman-compose down removes every $name container" \
    test -z "$(podman ps -a --filter "label=com.docker.compose.project=$run" --format '{{.Names}}')"
}

# --- 4. the compose profile fleet: two sidecars sharing budgets through Redis ----------------
echo "== podman-compose, profile fleet ($(elapsed))"
free_port () { node -e "const s = require('node:net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close() })"; }
STORE_AUTH_PROXY_FLEET_ADMIN_PORT_A=$(free_port)
STORE_AUTH_PROXY_FLEET_ADMIN_PORT_B=$(free_port)
export STORE_AUTH_PROXY_FLEET_ADMIN_PORT_A STORE_AUTH_PROXY_FLEET_ADMIN_PORT_B
fleet_services=(redis fleet-caller-a fleet-sidecar-a fleet-caller-b fleet-sidecar-b)
# The image was built from this checkout above: no second build.
t0=$(date +%s%N)
"${compose[@]}" up -d "${fleet_services[@]}" >"/tmp/$run-fleet.log" 2>&1 \
  || { grep -v systemd "/tmp/$run-fleet.log" | tail -40; not_ok "podman-compose up (profile fleet)"; exit 1; }
rm -f "/tmp/$run-fleet.log"
echo "podman-compose up -d (fleet) took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
redis="${run}_redis_1" fleet_a="${run}_fleet-sidecar-a_1" fleet_b="${run}_fleet-sidecar-b_1"
caller_a="${run}_fleet-caller-a_1" caller_b="${run}_fleet-caller-b_1"
admin_a="http://127.0.0.1:$STORE_AUTH_PROXY_FLEET_ADMIN_PORT_A" admin_b="http://127.0.0.1:$STORE_AUTH_PROXY_FLEET_ADMIN_PORT_B"
password=$(sed -n 's/^user store-auth-proxy on >\([^ ]*\) .*/\1/p' "$repo/deploy/demo-secrets/redis.conf")
check "the demo config gives the sidecars' user a password" test -n "$password"

check "the Redis container runs the official image name ($(podman inspect --format '{{.ImageName}}' "$redis"))" \
  eq "$(podman inspect --format '{{.ImageName}}' "$redis")" docker.io/library/redis:7-bookworm
fleet_ready () { curl -sf "$admin_a/readyz" >/dev/null && curl -sf "$admin_b/readyz" >/dev/null; }
check "both fleet sidecars become ready" wait_for "$READY_TIMEOUT_S" fleet_ready
# Redis may answer a moment after a sidecar is ready (it then runs on memory, and returns).
on_redis () { curl -s "$1/status" | node -e '
  let s = ""; process.stdin.on("data", (c) => { s += c }).on("end", () => {
    const r = JSON.parse(s).rateLimits ?? {}
    process.exit(r.backend === "redis" && r.redis?.up === true && r.redis?.url === "redis://redis:6379" ? 0 : 1)
  })'; }
check "sidecar a's /status says backend redis, up, at redis://redis:6379 (no password)" wait_for 20 on_redis "$admin_a"
check "sidecar b's /status says backend redis, up, at redis://redis:6379 (no password)" wait_for 20 on_redis "$admin_b"
check "the Redis healthcheck passes" quiet_podman healthcheck run "$redis"
# Redis on its own internal network: the fleet callers' namespaces reach it, the stand-in
# (on the default network only) does not even resolve its name.
reach_redis () { podman exec "$1" /nodejs/bin/node -e "
  const s = require('node:net').connect(6379, 'redis', () => { console.log('open'); s.destroy() })
  s.on('error', (e) => console.log(e.code)).setTimeout(3000, () => { console.log('timeout'); s.destroy() })"; }
check "sidecar a's namespace reaches Redis" eq "$(reach_redis "$caller_a")" open
stand_in_says=$(reach_redis "${run}_stand-in_1" 2>&1)
check "the stand-in cannot reach Redis (got: $stand_in_says)" test "$stand_in_says" != open

# The catalog rule (1/4h 6/1d cache=4h stale=1d): the stand-in's 4 MB catalog fetched through
# sidecar a, then asked of sidecar b, which has it from Redis; b asked for TI's answer
# (no-cache) finds the budget spent and gets the stored one. From inside each caller: the
# sidecars listen on their pod's loopback only.
catalog () { podman exec "$1" /nodejs/bin/node -e "
  fetch('http://127.0.0.1:8080/v2/store/products/catalog', { headers: { 'cache-control': '$2' } }).then(async (r) =>
    console.log(r.status, (await r.arrayBuffer()).byteLength, r.headers.get('cache-status')))"; }
through_a=$(catalog "$caller_a" max-age=60)
read -r status bytes cache_status <<<"$through_a"
check "the first catalog call, through sidecar a, is fetched and stored (got: $through_a)" \
  eq "$status ${cache_status%%; ttl=*}" "200 store-auth-proxy; fwd=miss; fwd-status=200; stored"
check "... the whole catalog ($bytes bytes)" test "$bytes" -gt 3000000
through_b=$(catalog "$caller_b" max-age=60)
check "the next, through sidecar b, is a hit from Redis: the same bytes, TI not asked (got: $through_b)" \
  eq "$(cut -d' ' -f1-2 <<<"$through_b") ${through_b#* * }" "200 $bytes store-auth-proxy; hit; ttl=${through_b##*ttl=}"
refetch=$(catalog "$caller_b" no-cache)
check "asked for TI's answer through b, the budget refuses and the stored one stands in (got: $refetch)" \
  eq "$(cut -d' ' -f1-2 <<<"$refetch") ${refetch##*detail=}" "200 $bytes no-refresh-budget"
refusals=$(curl -s "$admin_b/metrics" | awk '/^store_auth_proxy_rate_limited_total\{/ && /rule="GET \/v2\/store\/products\/catalog"/ && /reason="budget"/ && /action="refused"/ { n += $NF } END { print n + 0 }')
check "sidecar b counts the refusal by rule, reason and action (got $refusals)" eq "$refusals" 1
leaks=0
for c in "$fleet_a" "$fleet_b" "$caller_a" "$caller_b"; do
  if podman logs "$c" 2>&1 | grep -F -- "$password" >/dev/null; then leaks=$((leaks + 1)); fi
done
for path in /status /readyz /metrics; do
  if curl -s "$admin_a$path" | grep -F -- "$password" >/dev/null; then leaks=$((leaks + 1)); fi
done
check "the Redis password is in no log and no admin answer (found in $leaks)" eq "$leaks" 0
check "sidecar a logged that budgets are shared in Redis" logs_have "$fleet_a" '"redis":"redis://redis:6379"'
check "redis runs with init, a read-only root filesystem and no capabilities" \
  eq "$(podman inspect --format '{{.HostConfig.Init}} {{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}}' "$redis")" "true true []"
pid=$(node_pid "$redis")
check "redis runs as its image's uid 999 and cannot gain privileges" \
  eq "$(awk '/^Uid:/ { print $3 } /^NoNewPrivs:/ { print $2 }' "/proc/$pid/status" | paste -sd ' ')" "999 1"

stop_profile fleet fleet-redis "$redis" "$caller_a" "$fleet_a" "$caller_b" "$fleet_b"

# --- 5. the compose profile egress: the sidecar behind an authenticating egress proxy ------
echo "== podman-compose, profile egress ($(elapsed))"
STORE_AUTH_PROXY_EGRESS_ADMIN_PORT=$(free_port)
export STORE_AUTH_PROXY_EGRESS_ADMIN_PORT
egress_services=(egress-stand-in egress-proxy egress-caller egress-sidecar)
# The proxy's image is built (tinyproxy from Debian's archive, on the local node base; cached
# layers after the first run); the sidecar's was built from this checkout above.
t0=$(date +%s%N)
{ "${compose[@]}" build egress-proxy && "${compose[@]}" up -d "${egress_services[@]}"; } >"/tmp/$run-egress.log" 2>&1 \
  || { grep -v systemd "/tmp/$run-egress.log" | tail -40; not_ok "podman-compose up (profile egress)"; exit 1; }
rm -f "/tmp/$run-egress.log"
echo "podman-compose build egress-proxy, up -d (egress) took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
egress_proxy="${run}_egress-proxy_1" egress_sidecar="${run}_egress-sidecar_1"
egress_caller="${run}_egress-caller_1" egress_ti="${run}_egress-stand-in_1"
egress_admin="http://127.0.0.1:$STORE_AUTH_PROXY_EGRESS_ADMIN_PORT"
proxy_password=$(sed -n 's/^BasicAuth [^ ]* \(.*\)$/\1/p' "$repo/deploy/demo-secrets/tinyproxy.conf")
check "the demo proxy config has a Basic authentication password" test -n "$proxy_password"

egress_ready () { curl -sf "$egress_admin/readyz" >/dev/null; }
check "the sidecar behind the proxy becomes ready (its token came through the proxy)" wait_for "$READY_TIMEOUT_S" egress_ready
in_caller () { podman exec "$egress_caller" /nodejs/bin/node -e "$1"; }
said=$(in_caller "fetch('http://127.0.0.1:8080/v2/store/products/LM358BIDR').then(async (r) => console.log(r.status, (await r.json()).tiPartNumber))")
check "a store call through the sidecar answers 200 with the product (got: $said)" eq "$said" "200 LM358BIDR"
# tinyproxy's LogLevel Connect: a line for each request it carried, with its method and URL.
check "the proxy carried the token request (its log)" logs_have "$egress_proxy" 'POST http://egress-stand-in:8081/v1/oauth/accesstoken HTTP/1.1'
check "... and the store call" logs_have "$egress_proxy" 'GET http://egress-stand-in:8081/v2/store/products/LM358BIDR HTTP/1.1'
said=$(in_caller "fetch('http://egress-stand-in:8081/healthz').then((r) => console.log(r.status), (e) => console.log(e.cause?.code ?? e.message))")
check "TI cannot be reached from the sidecar's namespace but through the proxy (got: $said)" eq "$said" ENOTFOUND
said=$(in_caller "require('node:http').get({ host: 'egress-proxy', port: 3128, path: 'http://egress-stand-in:8081/healthz' },
  (r) => console.log(r.statusCode)).on('error', (e) => console.log(e.code))")
check "the proxy refuses a request without its credentials (407, got $said)" eq "$said" 407
status_doc=$(curl -s "$egress_admin/status")
check "/status shows both routes via the proxy, without its credentials" \
  has "$status_doc" '"HTTPS_PROXY":"http://egress-proxy:3128","HTTP_PROXY":"http://egress-proxy:3128","NO_PROXY":"","tokenRoute":"via http://egress-proxy:3128","upstreamRoute":"via http://egress-proxy:3128"'
leaks=0
for c in "$egress_sidecar" "$egress_caller"; do
  if podman logs "$c" 2>&1 | grep -F -- "$proxy_password" >/dev/null; then leaks=$((leaks + 1)); fi
done
for path in /status /readyz /metrics; do
  if curl -s "$egress_admin$path" | grep -F -- "$proxy_password" >/dev/null; then leaks=$((leaks + 1)); fi
done
check "the proxy's password is in no log of the pair and no admin answer (found in $leaks)" eq "$leaks" 0
check "the egress proxy's healthcheck passes" quiet_podman healthcheck run "$egress_proxy"
check "the egress proxy runs with init, a read-only root filesystem and no capabilities" \
  eq "$(podman inspect --format '{{.HostConfig.Init}} {{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}}' "$egress_proxy")" "true true []"
pid=$(node_pid "$egress_proxy")
check "the egress proxy runs as nobody (uid 65534) and cannot gain privileges" \
  eq "$(awk '/^Uid:/ { print $3 } /^NoNewPrivs:/ { print $2 }' "/proc/$pid/status" | paste -sd ' ')" "65534 1"

stop_profile egress egress-ti "$egress_ti" "$egress_proxy" "$egress_caller" "$egress_sidecar"

echo "== done in $(elapsed)"
echo "containers: $passed passed, $failed failed"
[ "$failed" = 0 ]
