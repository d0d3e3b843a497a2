#!/usr/bin/env bash
# Builds, on this machine, a local stand-in for the official Redis image that
# docker-compose.yml's `fleet` profile names, tagged with that name, so that the profile
# runs here although no container registry can be reached (as ../shared/tools/
# local-node-image.sh does for the node base images):
#
#   bash test/deploy/local-redis-image.sh     -> docker.io/library/redis:7-bookworm
#
# It copies the official image's layout where the compose file relies on it: redis-server
# and redis-cli in /usr/local/bin, a `redis` user with uid/gid 999, WORKDIR /data,
# EXPOSE 6379, CMD ["redis-server"], and an entrypoint that, like the official
# docker-entrypoint.sh, puts `redis-server` before arguments that are options or a .conf
# file and drops root to the redis user. Redis itself is Debian bookworm's redis-server
# (7.0), installed with apt-get from Debian's archive on top of the local
# docker.io/library/node:24-bookworm-slim stand-in (run local-node-image.sh slim 24 first).
# Needs root and podman. Reuses the image if present (REBUILD=1 to rebuild).
set -euo pipefail
tag=${REDIS_IMAGE:-docker.io/library/redis:7-bookworm}
base=docker.io/library/node:24-bookworm-slim

if podman image exists "$tag" && [ -z "${REBUILD:-}" ]; then
  echo "$tag already present (REBUILD=1 to rebuild)"; exit 0
fi
podman image exists "$base" || { echo "local-redis-image: $base is missing: run ../shared/tools/local-node-image.sh slim 24 first" >&2; exit 1; }

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cat >"$context/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
# As the official image's entrypoint: options or a config file alone mean redis-server.
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
  set -- redis-server "$@"
fi
# Started as root: run Redis as the redis user (the official image uses gosu).
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
EOF
cat >"$context/Containerfile" <<EOF
FROM $base
RUN groupadd -r -g 999 redis && useradd -r -g redis -u 999 redis \\
 && apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools \\
 && rm -rf /var/lib/apt/lists/* \\
 && ln -s /usr/bin/redis-server /usr/local/bin/redis-server && ln -s /usr/bin/redis-cli /usr/local/bin/redis-cli \\
 && mkdir /data && chown redis:redis /data
COPY docker-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
RUN chmod 0755 /usr/local/bin/docker-entrypoint.sh
VOLUME /data
WORKDIR /data
ENTRYPOINT ["docker-entrypoint.sh"]
EXPOSE 6379
CMD ["redis-server"]
EOF
podman build --pull=never --format docker -t "$tag" "$context" >"$context/build.log" 2>&1 \
  || { tail -30 "$context/build.log" >&2; echo "local-redis-image: the build failed (is Debian's archive reachable from a build?)" >&2; exit 1; }
echo "built $tag ($(podman image inspect --format '{{.Id}}' "$tag" | cut -c1-12))"
