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
# 6. brings up the compose profile `tracing` with a recording OTLP/HTTP receiver in Jaeger's
#    place (test/deploy/otlp-recorder/: no image of Jaeger can be had here), on Jaeger's ports,
#    and checks what reached it: a request that waited for the first token (TI paused while
#    the sidecar restarts), a catalog miss and hit, a wait for the budget, each as the server
#    and client spans of the caller's trace with the configured service name; nothing is
#    published beyond 127.0.0.1; then stops it (exit 0) and tears it down.
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
    "${run}_redis_1" "${run}_fleet-sidecar-a_1" "${run}_fleet-sidecar-b_1" "${run}_egress-proxy_1" "${run}_egress-sidecar_1" \
    "${run}_jaeger_1" "${run}_tracing-sidecar_1"
  podman rm -f -t 0 "$run-stand-in" "$run-proxy" >/dev/null 2>&1
  # A paused container would keep `down` from removing it.
  podman unpause "${run}_stand-in_1" >/dev/null 2>&1
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

# free_ports N: N distinct free loopback ports for the host side of published ports, held
# together while chosen (two picks one at a time may draw the same port) and below the
# kernel's ephemeral range, so no outgoing connection takes one before podman binds it.
free_ports () { node -e '
  const net = require("node:net")
  const [low] = require("node:fs").readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number)
  const held = []
  const pick = () => {
    if (held.length === Number(process.argv[1])) {
      console.log(held.map((s) => s.address().port).join(" ")); for (const s of held) s.close(); return
    }
    const s = net.createServer().once("error", pick)
    s.listen(10_000 + Math.floor(Math.random() * (low - 10_000)), "127.0.0.1", () => { held.push(s); pick() })
  }
  pick()' "$1"; }
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
  eq "$(inspect '{{json .Config.Entrypoint}}')" '["/nodejs/bin/node","--max-semi-space-size=4","--expose-gc","/app/dist/bundle/main.js"]'
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
# 127.0.0.1:9090 may be taken by a developer's demo: a free host port instead.
STORE_AUTH_PROXY_ADMIN_PORT=$(free_ports 1)
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

# up_profile NAME SERVICE...: brings up a profile's services, from the image built above.
up_profile () {
  local name=$1; shift
  t0=$(date +%s%N)
  "${compose[@]}" up -d "$@" >"/tmp/$run-$name.log" 2>&1 \
    || { grep -v systemd "/tmp/$run-$name.log" | tail -40; not_ok "podman-compose up (profile $name)"; exit 1; }
  rm -f "/tmp/$run-$name.log"
  echo "podman-compose up -d ($name) took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  # podman-compose 1.0.3 exits 0 when a container fails to start (a host port taken, say).
  local service state stopped=0
  for service in "$@"; do
    state=$(podman inspect --format '{{.State.Status}} {{.State.Error}}' "${run}_${service}_1" 2>&1 || true)
    [ "${state%% *}" = running ] || { echo "  ${service}: ${state:-missing}"; stopped=$((stopped + 1)); }
  done
  check "podman-compose up starts every container of the profile $name" eq "$stopped" 0
  [ "$stopped" -eq 0 ] || exit 1
}

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
ports=$(free_ports 2)
read -r STORE_AUTH_PROXY_FLEET_ADMIN_PORT_A STORE_AUTH_PROXY_FLEET_ADMIN_PORT_B <<<"$ports"
export STORE_AUTH_PROXY_FLEET_ADMIN_PORT_A STORE_AUTH_PROXY_FLEET_ADMIN_PORT_B
up_profile fleet redis fleet-caller-a fleet-sidecar-a fleet-caller-b fleet-sidecar-b
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
STORE_AUTH_PROXY_EGRESS_ADMIN_PORT=$(free_ports 1)
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

# --- 6. the compose profile tracing: the sidecar's spans in a collector with a UI ----------
echo "== podman-compose, profile tracing ($(elapsed))"
# Jaeger's image cannot be pulled here: a recording OTLP/HTTP receiver takes its place, on its
# ports (OTLP/HTTP 4318, the UI's 16686, where it shows the spans it recorded as JSON).
recorder_image=store-auth-proxy-otlp-recorder:test
podman build --pull=never --format docker -t "$recorder_image" "$repo/test/deploy/otlp-recorder" >"/tmp/$run-recorder.log" 2>&1 \
  || { tail -20 "/tmp/$run-recorder.log"; not_ok "the stand-in collector's image builds"; exit 1; }
rm -f "/tmp/$run-recorder.log"
STORE_AUTH_PROXY_TRACING_IMAGE=$recorder_image
ports=$(free_ports 2)
read -r STORE_AUTH_PROXY_TRACING_UI_PORT STORE_AUTH_PROXY_TRACING_ADMIN_PORT <<<"$ports"
export STORE_AUTH_PROXY_TRACING_IMAGE STORE_AUTH_PROXY_TRACING_UI_PORT STORE_AUTH_PROXY_TRACING_ADMIN_PORT
up_profile tracing stand-in jaeger tracing-caller tracing-sidecar
collector="${run}_jaeger_1" tracing_sidecar="${run}_tracing-sidecar_1" tracing_caller="${run}_tracing-caller_1"
stand_in="${run}_stand-in_1"
ui="http://127.0.0.1:$STORE_AUTH_PROXY_TRACING_UI_PORT" tracing_admin="http://127.0.0.1:$STORE_AUTH_PROXY_TRACING_ADMIN_PORT"
check "the collector runs the image STORE_AUTH_PROXY_TRACING_IMAGE names" \
  has "$(podman inspect --format '{{.ImageName}}' "$collector")" "$recorder_image"
tracing_ready () { curl -sf "$tracing_admin/readyz" >/dev/null; }
check "the tracing sidecar becomes ready" wait_for "$READY_TIMEOUT_S" tracing_ready

# A request that waits for the first token: TI paused, the sidecar restarted (no token yet, its
# token request hangs); once a request is in flight (it can be waiting for nothing else), TI
# goes on. From the pair's namespace: the sidecar listens on its loopback only.
in_flight () { curl -s "$tracing_admin/metrics" | awk '/^store_auth_proxy_requests_in_flight / { print $2 }'; }
pause_ti () { podman pause "$stand_in" >/dev/null; }
check "TI paused" pause_ti
podman restart -t 10 "$tracing_sidecar" >/dev/null 2>&1
tracing_live () { curl -sf "$tracing_admin/livez" >/dev/null; }
check "the tracing sidecar, restarted, is live" wait_for 30 tracing_live
# get PATH N...: GETs of PATH through the sidecar, all at once, each in the caller's trace
# number N (its id N in hex, the caller's span ...02); prints their statuses.
get () { local path=$1; shift; podman exec "$tracing_caller" /nodejs/bin/node -e "
  const one = (n) => fetch('http://127.0.0.1:8080$path', { headers: { traceparent: '00-' + n.toString(16).padStart(32, '0') + '-0000000000000002-01' } })
    .then(async (r) => { await r.arrayBuffer(); return r.status }, (e) => e.cause?.code ?? e.message)
  Promise.all(process.argv.slice(1).map((n) => one(Number(n)))).then((s) => console.log(s.join(' ')))" "$@"; }
get /v2/store/products/LM358BIDR 1 >/dev/null &
waiting=$!
one_in_flight () { [ "$(in_flight)" -ge 1 ] 2>/dev/null; }
check "with TI paused, a request waits in the restarted sidecar" wait_for 20 one_in_flight
podman unpause "$stand_in" >/dev/null
wait "$waiting" || true
check "the tracing sidecar is ready again" wait_for "$READY_TIMEOUT_S" tracing_ready

# A catalog miss, then a hit; two products at once, over 1 a second: one waits for the budget.
said="$(get /v2/store/products/catalog 2) $(get /v2/store/products/catalog 3)"
check "the catalog through the tracing sidecar, twice, answers 200 (got: $said)" eq "$said" "200 200"
said=$(get /v2/store/products/LM358BIDR 4 5)
check "two products at once answer 200 (got: $said)" eq "$said" "200 200"

# What the collector recorded, read from its UI port (published on loopback) by node on this machine.
spans_file="/tmp/$run-spans.json"
recorded () { curl -sf "$ui/" >"$spans_file" && node - "$spans_file" "$@" <<'JS'
const [file, ...want] = process.argv.slice(2)
const spans = JSON.parse(require('node:fs').readFileSync(file, 'utf8'))
// Each wanted trace (by number) has its server span, and the token request has arrived.
const of = (n) => spans.filter((s) => s.traceId === n.toString(16).padStart(32, '0'))
process.exit(want.every((n) => of(Number(n)).some((s) => s.kind === 2)) && spans.some((s) => s.name === 'token request') ? 0 : 1)
JS
}
check "the collector received the server spans of the four requests and a token request's span" wait_for 20 recorded 2 3 4 5
# ask NAME: one fact about the recorded spans, printed by node (`absent` when the spans are not there).
ask () { node - "$spans_file" "$1" <<'JS'
const [file, question] = process.argv.slice(2)
const spans = JSON.parse(require('node:fs').readFileSync(file, 'utf8'))
const of = (n) => spans.filter((s) => s.traceId === n.toString(16).padStart(32, '0'))
const server = (n) => of(n).find((s) => s.kind === 2)
const clients = (n) => of(n).filter((s) => s.kind === 3)
const event = (span, name) => span?.events.find((e) => e.name === name)?.attributes ?? {}
const answers = {
  // The miss: the caller's trace and parent, the configured resource, a client span under it.
  miss: () => {
    const s = server(2)
    return [s.name, s.parentSpanId, s.resource['service.name'], s.resource['deployment.environment.name'], s.attributes['http.response.status_code'],
      event(s, 'cache')['cache.result'], clients(2).map((c) => `${c.parentSpanId === s.spanId ? 'child' : 'orphan'} ${c.attributes['http.response.status_code']}`).join()].join(' ')
  },
  hit: () => `${event(server(3), 'cache')['cache.result']} sends=${clients(3).length}`,
  // The second of two at once waits (the first too, if the caller's own call just spent the second).
  budget: () => [4, 5].map((n) => event(server(n), 'quota')).filter((q) => q['quota.verdict'] === 'waited' && q['quota.waited_ms'] > 0).length > 0 ? 'waited' : 'none waited',
  // Every wait for the token: under its request's server span, linked to a token request's
  // span (a client span of its own trace, shared by the requests that wait together).
  token: () => {
    const tokens = spans.filter((s) => s.name === 'token request' && s.kind === 3 && s.parentSpanId === '')
    const waits = spans.filter((s) => s.name === 'wait for token')
    const placed = waits.filter((w) => spans.some((s) => s.spanId === w.parentSpanId && s.traceId === w.traceId && s.kind === 2) &&
      w.links.length === 1 && tokens.some((t) => t.spanId === w.links[0].spanId))
    return `each wait placed and linked: ${waits.length > 0 && placed.length === waits.length ? 'yes' : 'no'} (${waits.length} waits, ${tokens.length} token requests)`
  },
  services: () => [...new Set(spans.map((s) => s.resource['service.name']))].join()
}
let answer
try { answer = answers[question]() } catch { answer = 'absent' }
console.log(answer)
JS
}
said=$(ask miss)
check "a catalog miss: the server span continues the caller's trace, with the service name configured, and its client span is its child (got: $said)" \
  eq "$said" "GET /v2/store/products/catalog 0000000000000002 caller-sidecar compose 200 miss child 200"
said=$(ask hit)
check "the catalog's next call: served from the cache, nothing sent to TI (got: $said)" eq "$said" "hit sends=0"
said=$(ask budget)
check "two products at once, over 1 a second: one waited for the budget (got: $said)" eq "$said" waited
said=$(ask token)
check "the waits for the first token: each under its request's span, linked to the token request's (got: $said)" has "$said" "each wait placed and linked: yes"
said=$(ask services)
check "every span comes from the service named by OTEL_SERVICE_NAME (got: $said)" eq "$said" caller-sidecar
tracing_metrics=$(curl -s "$tracing_admin/metrics")
exported=$(awk '/^store_auth_proxy_trace_spans_exported_total / { print $2 }' <<<"$tracing_metrics")
dropped=$(awk '/^store_auth_proxy_trace_spans_dropped_total\{/ { n += $NF } END { print n + 0 }' <<<"$tracing_metrics")
check "the sidecar counts its spans exported, none dropped (exported ${exported:-none}, dropped $dropped)" test "${exported:-0}" -gt 0 -a "$dropped" = 0
bindings=$(for c in "$collector" "$tracing_caller" "$tracing_sidecar" "$stand_in"; do
  podman inspect --format '{{range $p, $b := .HostConfig.PortBindings}}{{range $b}}{{$p}}={{.HostIP}} {{end}}{{end}}' "$c"; done | xargs -n1 | sort | paste -sd ' ')
check "published: the UI and the admin port, on 127.0.0.1 only; not OTLP (got: $bindings)" eq "$bindings" "16686/tcp=127.0.0.1 9090/tcp=127.0.0.1"
check "the collector runs with init, a read-only root filesystem and no capabilities" \
  eq "$(podman inspect --format '{{.HostConfig.Init}} {{.HostConfig.ReadonlyRootfs}} {{.EffectiveCaps}}' "$collector")" "true true []"
rm -f "$spans_file"

stop_profile tracing default "$collector" "$tracing_caller" "$tracing_sidecar" "$stand_in"

echo "== done in $(elapsed)"
echo "containers: $passed passed, $failed failed"
[ "$failed" = 0 ]
