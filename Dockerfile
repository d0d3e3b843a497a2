# store-auth-proxy: the sidecar image. The same image also runs the stand-in TI APIs
# (`stand-in`) and the example caller (`caller`) for docker-compose.
#
#   docker build -t store-auth-proxy .          # or: podman build -t store-auth-proxy .
#   docker run --rm --read-only --cap-drop=ALL --security-opt=no-new-privileges \
#     -e AUTH_URL=... -e UPSTREAM_URL=... -e CLIENT_ID_FILE=... -e CLIENT_SECRET_FILE=... \
#     store-auth-proxy
#
# Runtime base: distroless Node.js 24, `nonroot` variant. It holds node, glibc, CA
# certificates and /etc/passwd and nothing else: no shell, no package manager, no npm, so
# a compromised process finds no tools and there are no OS packages to patch beyond glibc.
# The costs: no `sh` for debugging (use `kubectl debug` or the `:debug-nonroot` tag) and
# shell-form HEALTHCHECKs cannot work; ours is exec form.
#
# Both bases are build arguments, so a pipeline pins them by digest without editing this
# file, and the runtime's digest lands in the image's labels for scanners and SBOMs:
#   docker build \
#     --build-arg BUILD_BASE=docker.io/library/node:24-bookworm-slim@sha256:<digest> \
#     --build-arg RUNTIME_BASE=gcr.io/distroless/nodejs24-debian12:nonroot@sha256:<digest> \
#     --build-arg RUNTIME_BASE_DIGEST=sha256:<digest> \
#     --build-arg REVISION="$(git rev-parse HEAD)" --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
#     --build-arg SOURCE=https://<your git host>/<your repository> \
#     -t store-auth-proxy .
# (`docker buildx imagetools inspect <image>` or `crane digest <image>` print a digest.)
ARG BUILD_BASE=docker.io/library/node:24-bookworm-slim
ARG RUNTIME_BASE=gcr.io/distroless/nodejs24-debian12:nonroot

# --- build: compile TypeScript with the dev dependencies -----------------------------
FROM ${BUILD_BASE} AS build
WORKDIR /app
# Manifests first: this layer is rebuilt only when the lockfile changes, not on every
# source edit. No install scripts are needed to run tsc.
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm \
    npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src/ src/
COPY scripts/bundle.mjs scripts/
# dist/ from tsc, and the bundle the ENTRYPOINT runs (dist/bundle/main.js, every dependency in
# one file): it is ready with about a third less CPU than dist/main.js at the same memory, idle
# and under load (docs/performance.md). esbuild's own binary comes with its package.
RUN npm run build && npm run bundle --silent
# What runs says what it is (src/config/build-info.ts): the version is package.json's, and the
# revision is written into dist/REVISION from the REVISION build argument (the context has
# no .git, and nothing runs git at run time):
#   docker build --build-arg REVISION="$(git rev-parse HEAD)" -t store-auth-proxy .
# VERSION only feeds the image label below, which cannot read package.json: the build
# refuses a VERSION that differs from it. Declared after the build, so a new revision
# reruns only this step.
ARG VERSION=0.1.0
ARG REVISION=unknown
RUN node -e 'const v = require("./package.json").version; if (process.argv[1] !== v) { console.error(`VERSION=${process.argv[1]} is not package.json version ${v}`); process.exit(1) }' "$VERSION" \
 && printf '%s\n' "$REVISION" > dist/REVISION

# --- deps: production dependencies only, in their own stage ---------------------------
# Depends on the lockfile alone, so it stays cached across source changes (and BuildKit
# builds it in parallel with the stage above). No package in the lockfile has an install
# script, so --ignore-scripts loses nothing.
FROM ${BUILD_BASE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm \
    npm ci --omit=dev --ignore-scripts --no-audit --no-fund

# --- runtime ---------------------------------------------------------------------------
FROM ${RUNTIME_BASE}
WORKDIR /app
# Owned by root and not writable by the process: the code cannot be changed at run time
# even where the root filesystem is left writable. Nothing is written at run time, so
# `--read-only` needs no tmpfs. package.json carries "type": "module" for dist/.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY --from=build /app/dist ./dist
# Freed memory goes back to the OS (glibc's malloc tunables: why, and what they held, in
# src/cli/shipped.ts). The launcher `npm start` runs outside the image sets the same value
# and the same node flags as the ENTRYPOINT below; test/deploy/shipped.test.ts fails when the
# two differ. Written here, not run through the launcher, so a start costs no second exec.
ENV GLIBC_TUNABLES=glibc.malloc.mmap_threshold=32768:glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=2
# Numeric, so Kubernetes' runAsNonRoot can verify it without a runAsUser.
USER 65532:65532
# 8080: the proxy (HOST defaults to 127.0.0.1, so it is reachable only from the same
# network namespace: set HOST=0.0.0.0 when it must be reached from other containers).
# 9090: /livez, /readyz, /metrics (ADMIN_HOST defaults to 0.0.0.0).
EXPOSE 8080 9090
# Needs only node: `healthcheck` exits 0 when the admin /readyz answers 200. It loads
# node:http alone, not the sidecar: about 0.07 s of CPU and 47 MiB per check, not 0.5 s and 77 MiB.
# dist/main.js, not the bundle: node would read the bundle's 2.5 MiB at every check (1.6 x the CPU).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/nodejs/bin/node", "/app/dist/main.js", "healthcheck"]
# node is PID 1 and handles SIGTERM itself (not ready, drain, exit 0); never `npm start`,
# which would sit between the signal and the process. The flags are the launcher's
# (src/cli/shipped.ts: a 4 MiB young-generation semi-space keeps RSS under load about 20 MiB
# lower at the same CPU per request; --expose-gc gives V8's gc() without a second context,
# which costs CPU). The bundle runs every command; node_modules stay in the image for
# dist/main.js, which runs the same code file by file.
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=4", "--expose-gc", "/app/dist/bundle/main.js"]
CMD ["serve"]

# The same build arguments as the build stage (checked there against package.json), the
# base (declared before the first FROM, so named again here to be read), and what a scanner
# or SBOM tool reads: where the source is (SOURCE, your repository's URL), when the image
# was built (CREATED) and the base's digest (RUNTIME_BASE_DIGEST). Each is empty unless
# given, so that a rebuild of the same inputs is the same image.
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG RUNTIME_BASE
ARG RUNTIME_BASE_DIGEST=
ARG CREATED=
ARG SOURCE=
LABEL org.opencontainers.image.title="store-auth-proxy" \
      org.opencontainers.image.description="Authenticating reverse-proxy sidecar for the TI store API: one OAuth 2.0 client-credentials token, refreshed ahead, injected as a Bearer header" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="${RUNTIME_BASE}" \
      org.opencontainers.image.base.digest="${RUNTIME_BASE_DIGEST}"
