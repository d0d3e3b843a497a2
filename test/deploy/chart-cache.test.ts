// The chart's read-cache values: rateLimits.cache.maxBytes and entryMaxBytes rendered as
// CACHE_MAX_BYTES / CACHE_ENTRY_MAX_BYTES only when set, refused by the schema outside the
// sidecar's bounds and at render time when an entry may exceed the whole cache; rules with
// `cache=` / `stale=` accepted by the schema and by the sidecar's own parser, malformed ones
// refused. Each on a real render validated against Kubernetes' schemas (chart-helm.ts).
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { CHART, envOf, one, packagedParent, refusal, render, sidecarOf, type JsonObject } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const rules = (list: string[]): string[] => ['--set-json', `rateLimits.rules=${JSON.stringify(list)}`]
const cacheEnv = async (args: string[]): Promise<Record<string, string>> =>
  Object.fromEntries(Object.entries(envOf(sidecarOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy')).container))
    .filter(([k]) => k.startsWith('CACHE_')))

t.test('the cache sizes: rendered when set (as integers), left to the sidecar when null', async (t) => {
  t.same(await cacheEnv([]), {}, 'null: no CACHE_* env, the sidecar\'s defaults')
  t.same(await cacheEnv(['--set', 'rateLimits.cache.maxBytes=134217728', '--set', 'rateLimits.cache.entryMaxBytes=16777216']),
    { CACHE_MAX_BYTES: '134217728', CACHE_ENTRY_MAX_BYTES: '16777216' }, 'both, as integers (Helm reads 1.34217728e+08)')
  t.same(await cacheEnv(['--set', 'rateLimits.cache.maxBytes=65536', '--set', 'rateLimits.cache.entryMaxBytes=65536']),
    { CACHE_MAX_BYTES: '65536', CACHE_ENTRY_MAX_BYTES: '65536' }, 'the smallest cache, one entry as large as it')
  t.same(await cacheEnv(['--set', 'rateLimits.cache.entryMaxBytes=33554432']), { CACHE_ENTRY_MAX_BYTES: '33554432' },
    'an entry as large as the default cache')
  t.same(await cacheEnv(['--set', 'rateLimits.cache.maxBytes=8388608']), { CACHE_MAX_BYTES: '8388608' },
    'a cache as small as the default entry')
})

t.test('the schema refuses sizes outside the sidecar\'s bounds, naming the value', async (t) => {
  const mistakes: Array<[string, string[], RegExp]> = [
    ['a cache below 64 KiB', ['--set', 'rateLimits.cache.maxBytes=65535'], /rateLimits\.cache\.maxBytes/],
    ['a cache above 1 GiB', ['--set', 'rateLimits.cache.maxBytes=1073741825'], /rateLimits\.cache\.maxBytes/],
    ['an entry below 1 KiB', ['--set', 'rateLimits.cache.entryMaxBytes=1023'], /rateLimits\.cache\.entryMaxBytes/],
    ['an entry above 256 MiB', ['--set', 'rateLimits.cache.entryMaxBytes=268435457'], /rateLimits\.cache\.entryMaxBytes/],
    ['a size as a string', ['--set-string', 'rateLimits.cache.maxBytes=65536'], /rateLimits\.cache\.maxBytes/],
    ['a size with a unit', ['--set', 'rateLimits.cache.maxBytes=64Mi'], /rateLimits\.cache\.maxBytes/],
    ['an unknown key', ['--set', 'rateLimits.cache.ttl=1h'], /ttl/]
  ]
  for (const [what, args, message] of mistakes) t.match(refusal([...example, ...args]), message, `rejects ${what}`)
})

t.test('the render refuses an entry larger than the cache, which the sidecar refuses at start', async (t) => {
  const cases: Array<[string, string[], RegExp]> = [
    ['both set', ['--set', 'rateLimits.cache.maxBytes=1048576', '--set', 'rateLimits.cache.entryMaxBytes=1048577'], /entryMaxBytes \(1048577\) exceeds rateLimits\.cache\.maxBytes \(1048576/],
    ['a cache below the default entry (8 MiB)', ['--set', 'rateLimits.cache.maxBytes=1048576'], /entryMaxBytes \(8388608\) exceeds rateLimits\.cache\.maxBytes \(1048576/],
    ['an entry above the default cache (32 MiB)', ['--set', 'rateLimits.cache.entryMaxBytes=33554433'], /entryMaxBytes \(33554433\) exceeds rateLimits\.cache\.maxBytes \(33554432/]
  ]
  for (const [what, args, message] of cases) {
    const stderr = refusal([...example, ...args])
    t.match(stderr, message, what)
    t.match(stderr, /lower entryMaxBytes or raise maxBytes/, `${what}: says what to change`)
  }
  // In standalone mode, and in a parent chart's pod through the named sidecar template.
  t.match(refusal(['gateway', CHART, ...CI('standalone-values.yaml'), '--kube-version', '1.31', '--set', 'rateLimits.cache.maxBytes=1048576']),
    /exceeds rateLimits\.cache\.maxBytes/)
  t.match(refusal(['shop', packagedParent(), '--kube-version', '1.31', '--set', 'store-auth-proxy.rateLimits.cache.maxBytes=1048576']),
    /exceeds rateLimits\.cache\.maxBytes/)
  const parent = one(await render(['shop', packagedParent(), '--kube-version', '1.31', '--set', 'store-auth-proxy.rateLimits.cache.maxBytes=8388608']), 'Deployment')
  t.equal(envOf(sidecarOf(parent).container).CACHE_MAX_BYTES, '8388608', 'sidecar mode: rendered into the parent\'s pod')
})

t.test('rules with cache= and stale=: accepted by the schema and the sidecar, written to the file as given', async (t) => {
  const accepted = [
    'GET /v2/store/products/catalog 1/4h 6/1d cache=4h stale=1d',
    'GET /v2/store/products/* 10/1s cache=30m',
    '* /v2/store/inventory/** 5/1s 100/m cache=90s stale=7d',
    'POST /v2/store/orders 5/1s'
  ]
  const objects = await render([...example, ...rules(accepted)])
  const file = String((one(objects, 'ConfigMap', 'demo-store-auth-proxy-rate-limits').data as JsonObject).rules)
  t.same(file.split('\n').filter((l) => l !== '' && !l.startsWith('#')), accepted, 'one rule per line, options kept')
  t.match(file, /^# .*\[cache=DURATION \[stale=DURATION\]\]$/m, 'the file\'s header names the options')
  const parsed = parseRules(file, 'RATE_LIMITS_FILE', { fromFile: true })
  t.same(parsed.problems, [], 'the sidecar\'s parser accepts the file')
  t.same(parsed.rules.map((r) => r.cache), [
    { freshMs: 4 * 3_600_000, staleMs: 86_400_000 },
    { freshMs: 30 * 60_000, staleMs: 0 },
    { freshMs: 90_000, staleMs: 7 * 86_400_000 },
    undefined
  ])
})

t.test('the schema refuses malformed cache options, naming rateLimits.rules', async (t) => {
  const mistakes: Array<[string, string]> = [
    ['stale= without cache=', 'GET /a 1/s stale=1h'],
    ['stale= before cache=', 'GET /a 1/s stale=1h cache=1m'],
    ['cache= before the limits', 'GET /a cache=1m 1/s'],
    ['cache= without a limit', 'GET /a cache=1m'],
    ['cache= twice', 'GET /a 1/s cache=1m cache=2m'],
    ['cache= without an amount', 'GET /a 1/s cache=h'],
    ['cache= of 0', 'GET /a 1/s cache=0s'],
    ['cache= without a unit', 'GET /a 1/s cache=60'],
    ['cache= with an unknown unit', 'GET /a 1/s cache=1w'],
    ['an empty cache=', 'GET /a 1/s cache='],
    ['stale= with an unknown unit', 'GET /a 1/s cache=1m stale=2y'],
    ['an upper-case option', 'GET /a 1/s CACHE=1m'],
    ['an unknown option', 'GET /a 1/s ttl=1m'],
    ['cache= on a POST rule', 'POST /v2/store/orders 5/1s cache=1m'],
    ['cache= on a HEAD rule', 'HEAD /a 1/s cache=1m']
  ]
  for (const [what, rule] of mistakes) {
    t.match(refusal([...example, ...rules([rule])]), /rateLimits\.rules/, `rejects ${what}`)
    // The sidecar refuses each one at start too, except an order it tolerates and the
    // chart keeps to the documented one (limits, cache=, stale=).
    const { problems } = parseRules(rule, 'RATE_LIMITS')
    if (/before/.test(what)) t.same(problems, [], `the sidecar would take ${what}: the chart is stricter`)
    else t.not(problems.length, 0, `the sidecar refuses ${what} too`)
  }
})
