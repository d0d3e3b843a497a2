// docker-compose.yml and the Dockerfile, read as files: the properties the issue asks of
// them, checked on every `npm test`. test/deploy/containers.sh builds and runs them for real.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse } from 'yaml'
import { NODE_FLAGS } from '../../src/cli/shipped.js'
import { trimCredential } from '../../src/config/credentials.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET } from '../../src/demo/config.js'
import { loadEgressProxy, routeFor } from '../../src/egress/route.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { loadTracing, TRACING_VARIABLES } from '../../src/config/tracing.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const read = (path: string): string => readFileSync(join(ROOT, path), 'utf8')

interface Service {
  profiles?: string[]
  user?: string
  env_file?: string[]
  image?: string
  build?: string
  pull_policy?: string
  command?: string[]
  network_mode?: string
  networks?: string[]
  ports?: string[]
  environment?: Record<string, string>
  secrets?: string[]
  healthcheck?: { test?: string[] | string }
  depends_on?: Record<string, { condition: string }>
  init?: boolean
  read_only?: boolean
  cap_drop?: string[]
  security_opt?: string[]
}
interface Compose {
  services: Record<string, Service>
  secrets: Record<string, { file: string }>
  networks?: Record<string, { internal?: boolean }>
}

const compose = parse(read('docker-compose.yml'), { merge: true }) as Compose
const all = compose.services
// What `docker compose up` starts: the services of no profile. The profiles are checked below.
const services = Object.fromEntries(Object.entries(all).filter(([, s]) => s.profiles === undefined))
const inProfile = (profile: string): Record<string, Service> =>
  Object.fromEntries(Object.entries(all).filter(([, s]) => s.profiles?.includes(profile) === true))
const fleet = inProfile('fleet')
const egress = inProfile('egress')
const tracing = inProfile('tracing')
const SIDECAR = 'store-auth-proxy'

t.test('compose: the three services, all from the image this checkout builds', async (t) => {
  t.same(Object.keys(services).sort(), ['caller', 'stand-in', SIDECAR].sort())
  for (const [name, s] of Object.entries(services)) {
    t.equal(s.build, '.', `${name} is built from this checkout: \`docker compose up\` needs no other step`)
    t.equal(s.image, services[SIDECAR]?.image, `${name} uses the one image`)
  }
  t.same(services['stand-in']?.command, ['stand-in'])
  for (const [name, s] of Object.entries(services)) {
    // `up` must rebuild (from cached layers), or edited code runs stale.
    t.equal(s.pull_policy, 'build', `${name}: pull_policy build, so every \`up\` rebuilds from the checkout`)
  }
  t.same(services.caller?.command, ['caller'])
  t.equal(services[SIDECAR]?.command, undefined, 'the sidecar runs the image default (serve)')
})

t.test('compose: every container is hardened, the fleet profile\'s too', async (t) => {
  for (const [name, s] of Object.entries(all)) {
    t.equal(s.init, true, `${name}: init`)
    t.equal(s.read_only, true, `${name}: read-only root filesystem`)
    t.same(s.cap_drop, ['ALL'], `${name}: every capability dropped`)
    t.ok(s.security_opt?.includes('no-new-privileges:true'), `${name}: no-new-privileges`)
  }
})

t.test('compose: the sidecar shares the caller\'s network namespace, as in a pod', async (t) => {
  const sidecar = services[SIDECAR]
  t.equal(sidecar?.network_mode, 'service:caller')
  t.equal(sidecar?.ports, undefined, 'a container in another\'s namespace publishes nothing itself')
  t.equal(sidecar?.environment?.HOST, undefined, 'HOST stays at its loopback default')
  t.match(services.caller?.environment?.CALLER_TARGET_URL, /^http:\/\/localhost:8080\//, 'the caller uses localhost')
  const published = Object.values(all).filter((s) => s.profiles === undefined).flatMap((s) => s.ports ?? [])
  // eslint-disable-next-line no-template-curly-in-string -- compose's own interpolation: 9090 unless set
  t.same(published, ['127.0.0.1:${STORE_AUTH_PROXY_ADMIN_PORT:-9090}:9090'],
    'only the admin port is published, on loopback, 9090 by default')
})

t.test('compose: /status answers on every published admin port, published on this machine\'s loopback only', async (t) => {
  // A published port's peer is the engine's gateway, never 127.0.0.1: STATUS_FROM=loopback
  // would answer the documented `curl 127.0.0.1:909x/status` with 403.
  const sidecars = Object.entries(all).filter(([, s]) => s.environment?.AUTH_URL !== undefined)
  t.ok(sidecars.length >= 5, `every profile's sidecar (${sidecars.map(([name]) => name).join(', ')})`)
  let adminPublished = 0
  for (const [name, s] of sidecars) {
    const owner = s.network_mode?.startsWith('service:') === true ? all[s.network_mode.slice('service:'.length)] : s
    const ports = owner?.ports ?? []
    t.ok(ports.every((p) => p.startsWith('127.0.0.1:')), `${name}: published on loopback only (${ports.join(', ')})`)
    if (!ports.some((p) => p.endsWith(':9090'))) continue
    adminPublished++
    t.equal(s.environment?.STATUS_FROM, 'any', `${name}: its admin port published, STATUS_FROM=any`)
  }
  t.equal(adminPublished, 5, 'the default, fleet (2), egress and tracing profiles publish an admin port')
})

t.test('compose: credentials are compose secrets read from files, and only the demo pair', async (t) => {
  const sidecar = services[SIDECAR]
  t.same(sidecar?.secrets?.slice().sort(), ['client_id', 'client_secret'])
  t.match(sidecar?.environment, { CLIENT_ID_FILE: '/run/secrets/client_id', CLIENT_SECRET_FILE: '/run/secrets/client_secret' })
  for (const [name, s] of Object.entries(services)) {
    for (const key of Object.keys(s.environment ?? {})) {
      t.notMatch(key, /^(STAND_IN_)?CLIENT_(ID|SECRET)$/, `${name}: no credential in the environment (${key})`)
    }
  }
  t.equal(trimCredential(read(compose.secrets.client_id?.file ?? '')), DEMO_CLIENT_ID)
  t.equal(trimCredential(read(compose.secrets.client_secret?.file ?? '')), DEMO_CLIENT_SECRET)
  t.match(read('deploy/demo-secrets/README.md'), /DEMO CREDENTIALS ONLY/)
})

t.test('compose: exec-form healthchecks gate the start order', async (t) => {
  for (const [name, s] of Object.entries(services)) {
    const test = s.healthcheck?.test
    t.ok(Array.isArray(test) && test[0] === 'CMD', `${name}: exec form, the image has no shell`)
    t.same(Array.isArray(test) ? test.slice(1, 4) : [], ['/nodejs/bin/node', '/app/dist/main.js', 'healthcheck'], `${name}: the image's healthcheck command`)
  }
  t.same(services[SIDECAR]?.depends_on, { 'stand-in': { condition: 'service_healthy' }, caller: { condition: 'service_started' } })
  t.same(services.caller?.depends_on, { 'stand-in': { condition: 'service_healthy' } })
})

t.test('compose profile fleet: Redis and two caller + sidecar pairs sharing it, nothing without the profile', async (t) => {
  t.same(Object.keys(fleet).sort(), ['fleet-caller-a', 'fleet-caller-b', 'fleet-sidecar-a', 'fleet-sidecar-b', 'redis'])
  for (const [name, s] of Object.entries(fleet)) t.same(s.profiles, ['fleet'], `${name} is in the profile fleet only`)
  for (const [name, s] of Object.entries(services)) {
    t.notOk(Object.keys(s.depends_on ?? {}).some((d) => d in fleet), `${name} does not pull in a fleet service`)
  }
  const redis = fleet.redis as Service
  t.equal(redis.image, 'docker.io/library/redis:7-bookworm', 'the official image name (test/deploy/local-redis-image.sh stands in for it)')
  t.equal(redis.build, undefined)
  t.equal(redis.user, '999:999', 'the official image\'s redis user: no root, no capability needed')
  t.equal(redis.ports, undefined, 'Redis publishes no port')
  t.same(redis.command, ['redis-server', '/run/secrets/redis_conf'])
  t.same(redis.networks, ['fleet-redis'], 'Redis only on its own network')
  t.same(compose.networks?.['fleet-redis'], { internal: true }, 'which has no route out')
  // podman-compose 1.0.3 puts services without `networks:` on the sole declared network.
  t.same(compose.networks?.default, {}, 'the default network declared too, so the other services stay on it')
  for (const [name, s] of Object.entries(all)) {
    const joins = s.networks?.includes('fleet-redis') === true
    t.equal(joins, name === 'redis' || /^fleet-caller-[ab]$/.test(name), `${name} ${joins ? 'joins' : 'stays off'} fleet-redis`)
  }
  const conf = read(compose.secrets.redis_conf?.file ?? '')
  t.match(conf, /^user default off$/m, 'no default user')
  t.notMatch(conf, /^requirepass /m, 'no password for the default user')
  const password = /^user store-auth-proxy on >(\S+) /m.exec(conf)?.[1] ?? ''
  t.ok(password.length > 8, 'the sidecars\' user has a password')
  t.equal(trimCredential(read(compose.secrets.redis_url?.file ?? '')), `redis://store-auth-proxy:${password}@redis:6379`,
    'the URL the sidecars read names that user and password (test/deploy/compose-redis-acl.test.ts tries it)')
  t.match(JSON.stringify(redis.healthcheck?.test), /--user healthcheck/, 'the healthcheck logs in as its own PING-only user')

  const rules: string[] = []
  for (const side of ['a', 'b']) {
    const caller = fleet[`fleet-caller-${side}`] as Service
    const sidecar = fleet[`fleet-sidecar-${side}`] as Service
    t.same(caller.command, ['caller'])
    t.match(caller.environment?.CALLER_TARGET_URL, /^http:\/\/localhost:8080\//)
    t.match(caller.ports, [new RegExp(`^127\\.0\\.0\\.1:\\$\\{STORE_AUTH_PROXY_FLEET_ADMIN_PORT_${side.toUpperCase()}:-909\\d\\}:9090$`)], `caller ${side} publishes its sidecar's admin port on loopback`)
    t.equal(sidecar.network_mode, `service:fleet-caller-${side}`, `sidecar ${side} shares its caller's namespace`)
    t.equal(sidecar.environment?.HOST, undefined)
    t.same(sidecar.secrets?.slice().sort(), ['client_id', 'client_secret', 'redis_url'])
    t.match(sidecar.environment, {
      CLIENT_ID_FILE: '/run/secrets/client_id',
      CLIENT_SECRET_FILE: '/run/secrets/client_secret',
      RATE_LIMIT_REDIS_URL_FILE: '/run/secrets/redis_url'
    })
    t.notOk('RATE_LIMIT_REDIS_URL' in (sidecar.environment ?? {}), 'the URL (with its password) only as a file')
    t.equal(sidecar.depends_on?.redis?.condition, 'service_healthy')
    rules.push(sidecar.environment?.RATE_LIMITS ?? '')
  }
  t.equal(rules[0], rules[1], 'both sidecars have the same rules')
  const parsed = parseRules(rules[0] ?? '', 'RATE_LIMITS')
  t.same(parsed.problems, [])
  t.same(parsed.rules.map((r) => r.id), ['GET /v2/store/products/catalog', 'GET /v2/store/products/*'], 'the catalog rule first: the first match wins')
  // The shared budget shows: one caller alone stays under the per-minute limit, two do not.
  const perMinute = parsed.rules[1]?.limits[0]
  const callsPerMinute = 60_000 / Number(fleet['fleet-caller-a']?.environment?.CALLER_INTERVAL_MS)
  t.equal(perMinute?.windowMs, 60_000)
  t.ok(callsPerMinute < (perMinute?.count ?? 0) && 2 * callsPerMinute > (perMinute?.count ?? 0),
    `${callsPerMinute} calls a minute per caller, limit ${perMinute?.count ?? 0}`)
})

t.test('compose profile egress: TI behind an authenticating proxy, a sidecar sent through it, nothing without the profile', async (t) => {
  t.same(Object.keys(egress).sort(), ['egress-caller', 'egress-proxy', 'egress-sidecar', 'egress-stand-in'])
  for (const [name, s] of Object.entries(egress)) t.same(s.profiles, ['egress'], `${name} is in the profile egress only`)
  for (const [name, s] of Object.entries({ ...services, ...fleet })) {
    t.notOk(Object.keys(s.depends_on ?? {}).some((d) => d in egress), `${name} does not pull in an egress service`)
  }
  // TI only through the proxy: its stand-in on an internal network that only the proxy joins.
  t.same(compose.networks?.['egress-ti'], { internal: true })
  for (const [name, s] of Object.entries(all)) {
    const joins = s.networks?.includes('egress-ti') === true
    t.equal(joins, name === 'egress-stand-in' || name === 'egress-proxy', `${name} ${joins ? 'joins' : 'stays off'} egress-ti`)
  }
  t.same(egress['egress-stand-in']?.networks, ['egress-ti'], 'the stand-in TI on egress-ti alone')
  t.same(egress['egress-stand-in']?.command, ['stand-in'])
  t.same(egress['egress-caller']?.networks, ['default'], 'the pair on the default network alone, with the proxy')
  t.match(egress['egress-caller']?.ports, [/^127\.0\.0\.1:\$\{STORE_AUTH_PROXY_EGRESS_ADMIN_PORT:-9093\}:9090$/])

  const proxy = egress['egress-proxy'] as Service
  t.same(proxy.networks, ['default', 'egress-ti'])
  t.equal(proxy.ports, undefined, 'the proxy publishes no port')
  t.equal(proxy.build, './deploy/egress-proxy')
  t.equal(proxy.pull_policy, 'build')
  t.not(proxy.image, services[SIDECAR]?.image, 'an image of its own')
  t.equal(proxy.user, '65534:65534', 'nobody: no root, no capability needed')
  t.same(proxy.command, ['-c', '/run/secrets/egress_proxy_conf'])
  t.same(proxy.secrets, ['egress_proxy_conf'], 'its config, with the password, is a secret')
  for (const [name, s] of Object.entries(egress)) {
    const test = s.healthcheck?.test
    t.ok(Array.isArray(test) && test[0] === 'CMD', `${name}: an exec-form healthcheck`)
    // test/deploy/podman-compat.py splits podman-compose 1.0.3's exec form again at spaces.
    t.ok(Array.isArray(test) && test.every((word) => !word.includes(' ')), `${name}: no healthcheck word holds a space`)
  }
  const dockerfile = read('deploy/egress-proxy/Dockerfile')
  const buildBase = /^ARG BUILD_BASE=(\S+)$/m.exec(read('Dockerfile'))?.[1]
  t.equal(/^ARG BASE=(\S+)$/m.exec(dockerfile)?.[1], buildBase, 'on the base the sidecar\'s build stage uses: no other image to fetch')
  t.match(dockerfile, /apt-get install -y --no-install-recommends tinyproxy-bin/, 'Debian\'s tinyproxy')
  t.match(dockerfile, /^USER 65534:65534$/m)
  t.match(dockerfile, /^ENTRYPOINT \["\/usr\/bin\/tinyproxy", "-d"\]$/m, 'in the foreground, logging to stdout')

  const conf = read(compose.secrets.egress_proxy_conf?.file ?? '')
  const [, user = '', password = ''] = /^BasicAuth (\S+) (\S+)$/m.exec(conf) ?? []
  t.ok(password.length > 8, 'the proxy asks for Basic credentials, with a password')
  t.match(conf, /^Port 3128$/m)
  t.match(conf, /^LogLevel Connect$/m, 'it logs each request it carries (test/deploy/containers.sh reads it)')
  t.match(conf, /^ConnectPort 443$/m, 'tunnels to 443 only')

  const sidecar = egress['egress-sidecar'] as Service
  t.equal(sidecar.network_mode, 'service:egress-caller', 'the sidecar shares its caller\'s namespace')
  t.same(sidecar.env_file, ['./deploy/demo-secrets/egress-proxy.env'])
  const proxyEnv = Object.fromEntries(read('deploy/demo-secrets/egress-proxy.env').split('\n')
    .filter((l) => /^[A-Z_]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]))
  const proxyUrl = `http://${user}:${password}@egress-proxy:3128`
  t.same(proxyEnv, { HTTPS_PROXY: proxyUrl, HTTP_PROXY: proxyUrl }, 'the standard variables name the proxy with its user and password')
  for (const key of Object.keys(sidecar.environment ?? {})) t.notMatch(key, /proxy/i, `${key}: the proxy URL only in the env file`)
  t.notMatch(read('docker-compose.yml'), password, 'the password is not in the compose file')
  t.same(sidecar.secrets?.slice().sort(), ['client_id', 'client_secret'])
  const problems: string[] = []
  const settings = loadEgressProxy(proxyEnv, problems)
  t.same(problems, [])
  for (const key of ['AUTH_URL', 'UPSTREAM_URL']) {
    const target = sidecar.environment?.[key] ?? ''
    t.match(target, /^http:\/\/egress-stand-in:8081$/, `${key}: the stand-in TI`)
    t.match(routeFor(target, settings), { via: 'proxy', proxy: { display: 'http://egress-proxy:3128' } }, `${key} goes through the proxy`)
  }
  t.equal(sidecar.depends_on?.['egress-proxy']?.condition, 'service_healthy')
  t.match(read('deploy/demo-secrets/README.md'), /`tinyproxy\.conf` and `egress-proxy\.env`/)
})

t.test('compose profile tracing: Jaeger, a caller + sidecar pair exporting to it, nothing without the profile', async (t) => {
  t.same(Object.keys(tracing).sort(), ['jaeger', 'tracing-caller', 'tracing-sidecar'])
  for (const [name, s] of Object.entries(tracing)) t.same(s.profiles, ['tracing'], `${name} is in the profile tracing only`)
  for (const [name, s] of Object.entries(all)) {
    if (name in tracing) continue
    t.notOk(Object.keys(s.depends_on ?? {}).some((d) => d in tracing), `${name} does not pull in a tracing service`)
  }
  const jaeger = tracing.jaeger as Service
  t.match(jaeger.image, /^\$\{STORE_AUTH_PROXY_TRACING_IMAGE:-docker\.io\/jaegertracing\/jaeger:2\.\d+\.\d+\}$/,
    'Jaeger v2 (OTLP in natively), a pinned release; the variable lets test/deploy/containers.sh put a stand-in there')
  t.equal(jaeger.build, undefined)
  // eslint-disable-next-line no-template-curly-in-string -- compose's own interpolation
  t.same(jaeger.ports, ['127.0.0.1:${STORE_AUTH_PROXY_TRACING_UI_PORT:-16686}:16686'], 'its UI alone, on loopback: OTLP stays on the compose network')
  t.equal(jaeger.networks, undefined, 'on the default network, with the pair')

  const caller = tracing['tracing-caller'] as Service
  t.same(caller.command, ['caller'])
  t.match(caller.environment?.CALLER_TARGET_URL, /^http:\/\/localhost:8080\//)
  t.match(caller.ports, [/^127\.0\.0\.1:\$\{STORE_AUTH_PROXY_TRACING_ADMIN_PORT:-9094\}:9090$/])
  const sidecar = tracing['tracing-sidecar'] as Service
  const env = sidecar.environment ?? {}
  t.equal(sidecar.network_mode, 'service:tracing-caller', 'the sidecar shares its caller\'s namespace')
  t.same(sidecar.secrets?.slice().sort(), ['client_id', 'client_secret'])
  t.equal(sidecar.depends_on?.jaeger?.condition, 'service_started', 'spans wait in a bounded queue: Jaeger need not be ready first')
  for (const name of Object.keys(env).filter((k) => k.startsWith('OTEL_'))) {
    t.ok((TRACING_VARIABLES as readonly string[]).includes(name), `${name} is a variable the sidecar reads`)
  }
  const problems: string[] = []
  const config = loadTracing(env, problems)
  t.same(problems, [])
  t.match(config, {
    url: 'http://jaeger:4318/v1/traces',
    protocol: 'http/protobuf',
    serviceName: 'caller-sidecar',
    resourceAttributes: { 'deployment.environment.name': 'compose' }
  }, 'OTLP over HTTP to Jaeger\'s 4318, in the default encoding')
  t.ok((config?.scheduleDelayMs ?? Infinity) <= 1000, `spans leave within a second of their end (${config?.scheduleDelayMs ?? '?'} ms)`)
  const rules = parseRules(env.RATE_LIMITS ?? '', 'RATE_LIMITS')
  t.same(rules.problems, [])
  t.same(rules.rules.map((r) => r.id), ['GET /v2/store/products/catalog', 'GET /v2/store/products/*'], 'a cached catalog and a budget, to be seen in a trace')
})

t.test('Dockerfile: multi-stage, distroless non-root runtime, node as the exec-form command', async (t) => {
  const dockerfile = read('Dockerfile')
  const from = [...dockerfile.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1])
  const arg = (name: string): string => '$' + `{${name}}`
  t.same(from, [arg('BUILD_BASE'), arg('BUILD_BASE'), arg('RUNTIME_BASE')], 'the bases are build arguments, to be pinned by digest')
  const head = dockerfile.slice(0, dockerfile.search(/^FROM /m))
  t.match(head, /^ARG BUILD_BASE=docker\.io\/library\/node:24-bookworm-slim$/m, 'the build base by default')
  t.match(head, /^ARG RUNTIME_BASE=gcr\.io\/distroless\/nodejs24-debian12:nonroot$/m, 'the runtime base by default')
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '))
  t.match(runtime, /^USER 65532:65532$/m, 'a numeric non-root user')
  t.match(runtime, /^EXPOSE 8080 9090$/m)
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(runtime)?.[1]
  t.same(entrypoint === undefined ? undefined : JSON.parse(entrypoint), ['/nodejs/bin/node', ...NODE_FLAGS, '/app/dist/bundle/main.js'],
    'node itself, exec form, with the launcher\'s node flags (npm start\'s, which the benchmark measures)')
  t.match(runtime, /^HEALTHCHECK [^\n]*(\\\n[^\n]*)*CMD \["\/nodejs\/bin\/node", "\/app\/dist\/main\.js", "healthcheck"\]$/m, 'an exec-form healthcheck')
  t.notMatch(dockerfile, /^(CMD|ENTRYPOINT)\b.*npm/m, 'never npm start')
  t.match(dockerfile, /npm ci --omit=dev --ignore-scripts/, 'production dependencies only in the runtime')
  t.notMatch(runtime, /^RUN /m, 'nothing runs in the runtime stage (it has no shell)')
  for (const label of ['title', 'description', 'version', 'revision', 'licenses', 'source', 'created', 'base\\.name', 'base\\.digest']) {
    t.match(runtime, new RegExp(`org\\.opencontainers\\.image\\.${label}=`), `OCI label ${label}`)
  }
})

t.test('README: every compose `up` shown rebuilds (pull_policy build, or --build for podman-compose 1.0.3)', async (t) => {
  const ups = read('README.md').split('\n').filter((l) => /\bpodman-compose\b.* up\b/.test(l))
  t.ok(ups.length >= 1, 'the README shows podman-compose up')
  for (const line of ups) t.match(line, /--build/, line)
  t.match(read('docker-compose.yml'), /podman-compose up --build/)
})

t.test('Dockerfile: one version (package.json\'s), a build-time revision, both in the labels', async (t) => {
  const dockerfile = read('Dockerfile')
  const { version } = JSON.parse(read('package.json')) as { version: string }
  const defaults = [...dockerfile.matchAll(/^ARG VERSION=(\S+)$/gm)].map((m) => m[1])
  t.same(defaults, [version, version], 'both stages default VERSION to package.json\'s version')
  t.same([...dockerfile.matchAll(/^ARG REVISION=(\S+)$/gm)].map((m) => m[1]), ['unknown', 'unknown'])
  const build = dockerfile.slice(0, dockerfile.indexOf('\nFROM ', dockerfile.indexOf('AS build')))
  t.match(build, /require\("\.\/package\.json"\)\.version[^\n]*process\.exit\(1\)[^\n]*"\$VERSION"/, 'the build refuses a VERSION other than package.json\'s')
  t.match(build, /printf '%s\\n' "\$REVISION" > dist\/REVISION/, 'the revision goes where src/config/build-info.ts reads it')
  t.match(read('src/config/build-info.ts'), /readText\('\.\.\/REVISION'\)/)
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '))
  t.match(runtime, /org\.opencontainers\.image\.version="\$\{VERSION\}"/)
  t.match(runtime, /org\.opencontainers\.image\.revision="\$\{REVISION\}"/)
  t.match(runtime, /^ARG RUNTIME_BASE$/m, 'the base named again in the runtime stage, to be read in its label')
  t.match(runtime, /org\.opencontainers\.image\.base\.name="\$\{RUNTIME_BASE\}"/)
  t.match(runtime, /org\.opencontainers\.image\.base\.digest="\$\{RUNTIME_BASE_DIGEST\}"/)
})

t.test('.dockerignore: an allow-list that keeps secrets and local state out of the context', async (t) => {
  const lines = read('.dockerignore').split('\n').filter((l) => l !== '' && !l.startsWith('#'))
  t.equal(lines[0], '*', 'everything is ignored first')
  t.same(lines.slice(1).sort(), ['!package-lock.json', '!package.json', '!scripts/bundle.mjs', '!src/', '!tsconfig.build.json', '!tsconfig.json'])
})
