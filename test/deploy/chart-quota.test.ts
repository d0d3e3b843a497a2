// The chart's quota guard values: rateLimits.rules rendered into a ConfigMap
// file mounted read-only and named by RATE_LIMITS_FILE, with a checksum that rolls the
// pods; the Redis URL from an existing Secret mounted as a file (RATE_LIMIT_REDIS_URL_FILE);
// the timing values as env; nothing at all while rateLimits is left empty. Each on a real
// render validated against Kubernetes' schemas (test/deploy/chart-helm.ts), and the rendered
// rules file read by the sidecar's own parser.
import { createHash } from 'node:crypto'
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import {
  CHART, envOf, helmTemplate, NEEDS_HELM_TEMPLATE, ofKind, one, packagedParent, podSpec, refusal, render, sidecarOf,
  type Container, type JsonObject, type K8s
} from './chart-helm.js'
import { CI, checkSidecar } from './chart-expect.js'

t.setTimeout(240_000)

const RULES = ['GET /v2/store/products/catalog 1/4h 6/1d', '* /v2/store/** 5/1s']
const rules = (list: string[]): string[] => ['--set-json', `rateLimits.rules=${JSON.stringify(list)}`]
const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const quota = [...rules(RULES), '--set', 'rateLimits.redis.existingSecret=store-redis']

const annotationsOf = (deployment: K8s): JsonObject =>
  (((deployment.spec as JsonObject).template as JsonObject).metadata as JsonObject).annotations as JsonObject
const mountOf = (container: Container, name: string): JsonObject | undefined =>
  (container.volumeMounts as JsonObject[]).find((m) => m.name === name)
const volumeOf = (deployment: K8s, name: string): JsonObject | undefined =>
  (podSpec(deployment).volumes as JsonObject[]).find((v) => v.name === name)
const rateLimitEnv = (container: Container): Record<string, string> =>
  Object.fromEntries(Object.entries(envOf(container)).filter(([k]) => k.startsWith('RATE_LIMIT')))

t.test('rateLimits left empty: no ConfigMap, env, volume or annotation (the embedded default)', async (t) => {
  for (const args of [example, ['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31']]) {
    const objects = await render(args)
    t.equal(ofKind(objects, 'ConfigMap').length, 0, 'no ConfigMap')
    const deployment = one(objects, 'Deployment', `${args[0] as string}-store-auth-proxy`)
    const { container } = sidecarOf(deployment)
    t.same(rateLimitEnv(container), {}, 'no RATE_LIMIT* env')
    t.same((container.volumeMounts as JsonObject[]).map((m) => m.name), ['store-auth-proxy-credentials'], 'only the credentials mount')
    t.same((podSpec(deployment).volumes as JsonObject[]).map((v) => v.name), ['store-auth-proxy-credentials'], 'only the credentials volume')
    t.notOk('checksum/rate-limits' in annotationsOf(deployment), 'no rules checksum')
  }
  t.same(await render(['app', CHART, '--set', 'credentials.existingSecret=creds']), [], 'sidecar mode: still nothing')
})

t.test('rules and Redis: the ConfigMap, its read-only mount, the env, the Redis Secret file', async (t) => {
  const objects = await render([...example, ...quota, '--set', 'rateLimits.maxWaitMs=0', '--set', 'rateLimits.cooldownMs=2000',
    '--set', 'rateLimits.cooldownMaxMs=3600000', '--set', 'rateLimits.redis.timeoutMs=250', '--set', 'rateLimits.redis.aloneMaxMs=7200000'])
  const map = one(objects, 'ConfigMap', 'demo-store-auth-proxy-rate-limits')
  const file = String((map.data as JsonObject).rules)
  const lines = file.split('\n').filter((l) => l !== '' && !l.startsWith('#'))
  t.same(lines, RULES, 'one rule per line, in the order given (the first match wins)')

  const deployment = one(objects, 'Deployment', 'demo-store-auth-proxy')
  // Everything else about the sidecar is as without the quota guard.
  const container = checkSidecar(t, deployment, {
    native: true,
    host: '127.0.0.1',
    standalone: false,
    secretName: 'demo-store-auth-proxy',
    authUrl: 'http://demo-store-auth-proxy-stand-in:8081',
    shutdownDelayMs: '0'
  })
  t.same(rateLimitEnv(container), {
    RATE_LIMITS_FILE: '/etc/store-auth-proxy/rate-limits/rules',
    RATE_LIMIT_MAX_WAIT_MS: '0',
    RATE_LIMIT_COOLDOWN_MS: '2000',
    // int64: Helm reads numbers as float64, which would print 3.6e+06.
    RATE_LIMIT_COOLDOWN_MAX_MS: '3600000',
    // replicaCount 1 plus the rolling update's surge.
    RATE_LIMIT_FLEET_SIZE: '2',
    RATE_LIMIT_REDIS_URL_FILE: '/var/run/secrets/store-auth-proxy-redis/url',
    RATE_LIMIT_REDIS_TIMEOUT_MS: '250',
    RATE_LIMIT_ALONE_MAX_MS: '7200000'
  }, 'the RATE_LIMIT* env')
  t.notOk('RATE_LIMITS' in envOf(container) || 'RATE_LIMIT_REDIS_URL' in envOf(container), 'rules and URL only as files')

  t.same(mountOf(container, 'store-auth-proxy-rate-limits'), { name: 'store-auth-proxy-rate-limits', mountPath: '/etc/store-auth-proxy/rate-limits', readOnly: true })
  t.same(volumeOf(deployment, 'store-auth-proxy-rate-limits'), {
    name: 'store-auth-proxy-rate-limits',
    configMap: { name: map.metadata.name, defaultMode: 292, items: [{ key: 'rules', path: 'rules' }] }
  }, 'the volume is the ConfigMap, its key at the file RATE_LIMITS_FILE names')
  t.same(mountOf(container, 'store-auth-proxy-rate-limit-redis'), { name: 'store-auth-proxy-rate-limit-redis', mountPath: '/var/run/secrets/store-auth-proxy-redis', readOnly: true })
  t.same(volumeOf(deployment, 'store-auth-proxy-rate-limit-redis'), {
    name: 'store-auth-proxy-rate-limit-redis',
    secret: { secretName: 'store-redis', defaultMode: 292, items: [{ key: 'url', path: 'url' }] }
  }, 'the volume is the existing Secret\'s key, at the file RATE_LIMIT_REDIS_URL_FILE names')
  t.equal(ofKind(objects, 'Secret').map((s) => s.metadata.name).join(), 'demo-store-auth-proxy', 'the chart never renders the Redis Secret')
  t.notOk((container.volumeMounts as JsonObject[]).some((m) => m.subPath !== undefined), 'no subPath')

  // The file the sidecar reads: its own parser accepts it, with the ids the metrics use.
  const parsed = parseRules(file, 'RATE_LIMITS_FILE')
  t.same(parsed.problems, [])
  t.same(parsed.rules.map((r) => r.id), ['GET /v2/store/products/catalog', '* /v2/store/**'])
  t.same(parsed.rules.map((r) => r.limits.map((l) => l.text)), [['1/4h', '6/1d'], ['5/1s']])
})

t.test('the rules checksum rolls the pods when, and only when, the rules change', async (t) => {
  const checksum = async (args: string[]): Promise<string> =>
    String(annotationsOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy'))['checksum/rate-limits'])
  const base = await checksum(rules(RULES))
  t.match(base, /^[0-9a-f]{64}$/)
  const file = String((one(await render([...example, ...rules(RULES)]), 'ConfigMap').data as JsonObject).rules)
  t.equal(base, createHash('sha256').update(file.replace(/\n$/, '')).digest('hex'), 'the sha256 of the rules file')
  t.equal(await checksum([...rules(RULES), '--set', 'rateLimits.maxWaitMs=500', '--set', 'rateLimits.redis.existingSecret=r']), base,
    'unchanged by other values (they are env: a change rolls the pods anyway)')
  t.not(await checksum(rules(['GET /v2/store/products/catalog 1/4h 7/1d', '* /v2/store/** 5/1s'])), base, 'a changed limit')
  t.not(await checksum(rules([...RULES].reverse())), base, 'a changed order (the first match wins)')
})

t.test('each value alone renders alone; Redis without rules is cool-downs shared by the fleet', async (t) => {
  const redisOnly = await render([...example, '--set', 'rateLimits.redis.existingSecret=store-redis'])
  t.equal(ofKind(redisOnly, 'ConfigMap').length, 0, 'no rules: no ConfigMap')
  const { container } = sidecarOf(one(redisOnly, 'Deployment', 'demo-store-auth-proxy'))
  t.same(rateLimitEnv(container), { RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_REDIS_URL_FILE: '/var/run/secrets/store-auth-proxy-redis/url' })
  const wait = sidecarOf(one(await render([...example, '--set', 'rateLimits.maxWaitMs=250']), 'Deployment', 'demo-store-auth-proxy')).container
  t.same(rateLimitEnv(wait), { RATE_LIMIT_MAX_WAIT_MS: '250' })
  const moved = await render([...example, ...quota, '--set', 'rateLimits.mountPath=/etc/quota', '--set', 'rateLimits.redis.key=redis-url',
    '--set', 'rateLimits.redis.mountPath=/var/run/redis'])
  const sidecar = sidecarOf(one(moved, 'Deployment', 'demo-store-auth-proxy')).container
  t.match(rateLimitEnv(sidecar), { RATE_LIMITS_FILE: '/etc/quota/rules', RATE_LIMIT_REDIS_URL_FILE: '/var/run/redis/redis-url' })
  t.match(volumeOf(one(moved, 'Deployment', 'demo-store-auth-proxy'), 'store-auth-proxy-rate-limit-redis'),
    { secret: { items: [{ key: 'redis-url', path: 'redis-url' }] } })
})

t.test('standalone mode: replicas share the budget through Redis', async (t) => {
  const objects = await render(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31', ...quota])
  one(objects, 'ConfigMap', 'gateway-store-auth-proxy-rate-limits')
  const deployment = one(objects, 'Deployment', 'gateway-store-auth-proxy')
  t.match(rateLimitEnv(sidecarOf(deployment).container), { RATE_LIMITS_FILE: String, RATE_LIMIT_REDIS_URL_FILE: String })
  t.match(annotationsOf(deployment), { 'checksum/rate-limits': /^[0-9a-f]{64}$/ })
})

t.test('sidecar mode: a parent chart mounts the ConfigMap the dependency renders', async (t) => {
  const parent = packagedParent()
  const objects = await render(['shop', parent, '--kube-version', '1.31', ...rules(RULES).map((a) => a.replace(/^rateLimits/, 'store-auth-proxy.rateLimits')),
    '--set', 'store-auth-proxy.rateLimits.redis.existingSecret=store-redis'])
  t.same(objects.map((o) => `${o.kind}/${o.metadata.name}`).sort(), ['ConfigMap/shop-store-auth-proxy-rate-limits', 'Deployment/shop-my-app', 'NetworkPolicy/shop-my-app'])
  const deployment = one(objects, 'Deployment', 'shop-my-app')
  t.match(volumeOf(deployment, 'store-auth-proxy-rate-limits'), { configMap: { name: 'shop-store-auth-proxy-rate-limits' } })
  t.match(rateLimitEnv(sidecarOf(deployment).container), { RATE_LIMITS_FILE: '/etc/store-auth-proxy/rate-limits/rules' })
  t.match(annotationsOf(deployment), { 'checksum/rate-limits': /^[0-9a-f]{64}$/ }, 'through store-auth-proxy.podAnnotations')
})

t.test('NOTES: rules without Redis where several pods run them get a note', { skip: NEEDS_HELM_TEMPLATE }, async (t) => {
  const notes = (args: string[]): string => {
    const out = helmTemplate([...args, '--show-notes'])
    t.equal(out.status, 0, out.stderr)
    return out.stderr
  }
  const standalone = ['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31']
  t.match(notes([...standalone, ...rules(RULES)]), /rateLimits\.rules without rateLimits\.redis: every pod's sidecar keeps its own budgets/)
  t.notMatch(notes([...standalone, ...quota]), /without rateLimits\.redis/, 'with Redis: no note')
  t.notMatch(notes([...standalone, ...rules(RULES), '--set', 'replicaCount=1']), /without rateLimits\.redis/, 'one replica: no note')
  t.notMatch(notes(standalone), /rateLimits/, 'no rules: no note')
})

t.test('long release names: the ConfigMap name keeps its suffix and fits', async (t) => {
  const release = 'a-very-long-release-name-for-the-shop-checkout-api-xy'
  const objects = await render([release, CHART, ...CI('example-values.yaml'), '--kube-version', '1.31', ...rules(RULES), '--set', 'metrics.dashboard.enabled=true'])
  const names = ofKind(objects, 'ConfigMap').map((m) => m.metadata.name)
  t.equal(new Set(names).size, 2, `two ConfigMaps, two names: ${names.join(', ')}`)
  const map = names.find((n) => n.endsWith('-rate-limits')) ?? ''
  t.ok(map.length <= 63, `${map} fits in 63 characters`)
})

t.test('values.schema.json refuses what the sidecar would refuse at start, naming the value', async (t) => {
  const mistakes: Array<[string, string[]]> = [
    ['a rule without a limit', rules(['GET /v2/store/products'])],
    ['a lower-case method', rules(['get /v2/store/products 1/s'])],
    ['a path without its leading /', rules(['GET v2/store 1/s'])],
    ['a limit of 0', rules(['GET /v2/store 0/1s'])],
    ['a window of 0', rules(['GET /v2/store 1/0s'])],
    ['an unknown unit', rules(['GET /v2/store 1/1w'])],
    ['two rules in one string', rules(['GET /a 1/s; GET /b 1/s'])],
    ['a rule with a newline', rules(['GET /a 1/s\nGET /b 1/s'])],
    ['a path with a query', rules(['GET /a?b=c 1/s'])],
    ['a comment in a rule', rules(['GET /a 1/s # note'])],
    ['the same rule twice', rules(['GET /a 1/s', 'GET /a 1/s'])],
    ['rules as one string', ['--set', 'rateLimits.rules=GET /a 1/s']]
  ]
  for (const [what, args] of mistakes) t.match(refusal([...example, ...args]), /rateLimits\.rules/, `rejects ${what}`)
  const numbers: Array<[string, string[], RegExp]> = [
    ['a negative wait', ['--set', 'rateLimits.maxWaitMs=-1'], /rateLimits\.maxWaitMs/],
    ['a cool-down as a string', ['--set-string', 'rateLimits.cooldownMs=1000'], /rateLimits\.cooldownMs/],
    ['a cap above one day', ['--set', 'rateLimits.cooldownMaxMs=86400001'], /rateLimits\.cooldownMaxMs/],
    ['a Redis timeout of 0', ['--set', 'rateLimits.redis.timeoutMs=0'], /rateLimits\.redis\.timeoutMs/],
    ['a bound on spending alone above 30 days', ['--set', 'rateLimits.redis.aloneMaxMs=2592000001'], /rateLimits\.redis\.aloneMaxMs/],
    ['a Secret key with a slash', ['--set', 'rateLimits.redis.key=a/b'], /rateLimits\.redis\.key/],
    ['a relative mount path', ['--set', 'rateLimits.mountPath=quota'], /rateLimits\.mountPath/],
    ['the Redis URL itself in values', ['--set', 'rateLimits.redis.url=redis://x:6379'], /url/]
  ]
  for (const [what, args, message] of numbers) t.match(refusal([...example, ...args]), message, `rejects ${what}`)
  // What the schema accepts, the sidecar's parser accepts too.
  const accepted = ['POST /v2/store/orders/*/items 10/500ms', '* /v2/store/** 5/1s 100/m', 'GET / 1/d', 'PURGE /x/** 3/24h']
  await render([...example, ...rules(accepted)])
  t.same(parseRules(accepted.join('\n'), 'RATE_LIMITS').problems, [])
})

t.test('rateLimits.fleetSize: set, or with Redis in the chart\'s own Deployment its replicas plus the surge', async (t) => {
  const fleet = async (args: string[]): Promise<string | undefined> =>
    envOf(sidecarOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy')).container).RATE_LIMIT_FLEET_SIZE
  t.equal(await fleet(['--set', 'rateLimits.fleetSize=7']), '7', 'set: as given')
  t.equal(await fleet(['--set', 'rateLimits.fleetSize=7', ...quota]), '7', 'set, with Redis: as given')
  t.equal(await fleet(quota), '2', 'Redis, one replica: 1 + 1 surge')
  t.equal(await fleet([...quota, '--set', 'replicaCount=4']), '5', 'Redis, 4 replicas: 4 + 1')
  t.equal(await fleet([...quota, '--set', 'replicaCount=5']), '7', 'Redis, 5 replicas: 5 + 2')
  t.equal(await fleet([]), undefined, 'no Redis, unset: the sidecar\'s default')
  t.match(refusal([...example, '--set', 'rateLimits.fleetSize=0']), /fleetSize/, 'below 1: refused by the schema')

  const parent = one(await render(['shop', packagedParent(), '--kube-version', '1.31', '--set', 'store-auth-proxy.rateLimits.redis.existingSecret=r']), 'Deployment')
  t.equal(envOf(sidecarOf(parent).container).RATE_LIMIT_FLEET_SIZE, undefined, 'sidecar mode: the chart cannot see the replicas')
})
