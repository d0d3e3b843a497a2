// RATE_LIMITS syntax and matching, table-driven, and their configuration errors.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { matchRule, matchSegments, parseLimit, parseRules } from '../../src/config/rate-limit-rules.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
const noFiles = (path: string): string => { throw Object.assign(new Error(`no file ${path}`), { code: 'ENOENT' }) }

function problemsOf (env: Record<string, string | undefined>, readFile = noFiles): string[] {
  try {
    loadConfig({ ...base, ...env }, readFile)
    return []
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems]
    throw err
  }
}

t.test('limits: N/WINDOW with ms, s, m, h, d; a bare unit is one of it; 1 ms to 1 day', async (t) => {
  const cases: Array<[string, number, number]> = [
    ['5/1s', 5, 1000], ['5/s', 5, 1000], ['1/4h', 1, 4 * 3_600_000], ['6/1d', 6, 86_400_000], ['10/250ms', 10, 250],
    ['3/15m', 3, 900_000], ['1/1ms', 1, 1], ['1/24h', 1, 86_400_000], ['1/86400s', 1, 86_400_000]
  ]
  for (const [text, count, windowMs] of cases) t.same(parseLimit(text), { count, windowMs, text }, text)
  for (const bad of ['0/1s', '5', '5/', '/1s', '5/1', '5/1w', '5/2d', '5/25h', '5/0s', '-1/s', '1.5/s', '5/1.5s', '5/ 1s', '5/1S']) {
    t.type(parseLimit(bad), 'string', bad)
  }
})

t.test('rules: separated by ; or newlines, # comments, blank lines; ids as written', async (t) => {
  const { rules, problems } = parseRules(`
    # the catalog: TI's published limits
    GET /v2/store/products/catalog 1/4h 6/1d
    POST /v2/store/orders/*/cancel 1/m ; * /v2/store/** 5/1s   # trailing comment
  `, 'RATE_LIMITS')
  t.same(problems, [])
  t.same(rules.map((r) => r.id), ['GET /v2/store/products/catalog', 'POST /v2/store/orders/*/cancel', '* /v2/store/**'])
  t.same(rules[0]?.limits.map((l) => l.text), ['1/4h', '6/1d'])
})

t.test('every rule problem at once, each naming its rule and the problem', async (t) => {
  const { rules, problems } = parseRules('get /x 1/s; GET x 1/s; GET /a/**/b 1/s; GET /a*b 1/s; GET /ok; GET /y 5/q 0/s; GET /z 1/s; GET /z 2/s', 'RATE_LIMITS')
  t.same(rules.map((r) => r.id), ['GET /z'])
  t.match(problems, [
    /^RATE_LIMITS: rule 1 "get \/x 1\/s": method "get" must be an upper-case HTTP method or \*$/,
    /^RATE_LIMITS: rule 2 "GET x 1\/s": path "x" must start with \/$/,
    /^RATE_LIMITS: rule 3 "GET \/a\/\*\*\/b 1\/s": path "\/a\/\*\*\/b": \*\* may only be the last segment$/,
    /^RATE_LIMITS: rule 4 "GET \/a\*b 1\/s": path "\/a\*b": \* must be a whole segment/,
    /^RATE_LIMITS: rule 5 "GET \/ok": needs at least one limit/,
    /^RATE_LIMITS: rule 6 "GET \/y 5\/q 0\/s": limit "5\/q" is not N\/WINDOW/,
    /^RATE_LIMITS: rule 6 "GET \/y 5\/q 0\/s": limit "0\/s": N must be a positive integer$/,
    /^RATE_LIMITS: rule 8 "GET \/z 2\/s": repeats the rule GET \/z/
  ])
})

t.test('matching: literal segments, * one non-empty segment, ** zero or more at the end; first rule wins', async (t) => {
  const { rules } = parseRules('GET /v2/store/products/catalog 1/4h; * /v2/store/orders/*/lines 5/s; DELETE /v2/store/** 1/s; * /v2/store/** 5/s', 'RATE_LIMITS')
  const cases: Array<[string, string, string | undefined]> = [
    ['GET', '/v2/store/products/catalog', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products/catalog?currency=USD', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products/%63atalog', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products/%63%41talog', '* /v2/store/**'],
    ['HEAD', '/v2/store/products/catalog', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products/catalog/', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store//products/catalog', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products/catalog;v=1', 'GET /v2/store/products/catalog'],
    ['GET', '/v2/store/products%2Fcatalog', 'GET /v2/store/products/catalog'],
    ['POST', '/v2/store/products/catalog', '* /v2/store/**'],
    ['GET', '/v2/store/products/Catalog', '* /v2/store/**'],
    ['PUT', '/v2/store/orders/42/lines', '* /v2/store/orders/*/lines'],
    ['PUT', '/v2/store/orders//lines', '* /v2/store/**'],
    ['DELETE', '/v2/store/orders/42/lines', '* /v2/store/orders/*/lines'],
    ['DELETE', '/v2/store/orders/42', 'DELETE /v2/store/**'],
    ['GET', '/v2/store', '* /v2/store/**'],
    ['GET', '/v2/storefront', undefined],
    ['GET', '/v1/store/products/catalog', undefined],
    ['GET', '/v2/store%2Fproducts', '* /v2/store/**'],
    ['GET', '/v2/stor%65', '* /v2/store/**']
  ]
  for (const [method, target, id] of cases) t.equal(matchRule(rules, method, target)?.id, id, `${method} ${target}`)
  t.equal(matchRule([], 'GET', '/v2/store/x'), undefined)
})

t.test('matchSegments: unreserved characters and %2F decoded, ;parameters and empty segments dropped', async (t) => {
  t.same(matchSegments('/a%2Db%5F%7E%2E?q=%63'), ['a-b_~.'])
  t.same(matchSegments('/a%2Fb%20c%25'), ['a', 'b%20c%25'])
  t.same(matchSegments('/%e2%82%ac'), ['%e2%82%ac'])
  t.same(matchSegments('//a///b/;x/c;y=1/'), ['a', 'b', 'c'])
  t.same(matchSegments('/'), [])
})

t.test('rules that could never apply, or mean less than they say, are refused', async (t) => {
  const { rules, problems } = parseRules(
    '* /v2/store/** 5/1s; GET /v2/store/products/catalog 1/4h; GET /v2/** 1/s; HEAD /v2/x 1/s; GET /v2/y 2/1m 2/1m', 'RATE_LIMITS')
  t.same(rules.map((r) => r.id), ['* /v2/store/**', 'GET /v2/**'])
  t.match(problems, [
    /^RATE_LIMITS: rule 2 "GET \/v2\/store\/products\/catalog 1\/4h": is hidden by the earlier rule \* \/v2\/store\/\*\*/,
    /^RATE_LIMITS: rule 4 "HEAD \/v2\/x 1\/s": is hidden by the earlier rule GET \/v2\/\*\*/,
    /^RATE_LIMITS: rule 5 "GET \/v2\/y 2\/1m 2\/1m": repeats the limit 2\/1m$/
  ])
  // A narrower rule first, then the broader one: both apply.
  t.same(parseRules('GET /v2/store/products/catalog 1/4h; * /v2/store/** 5/1s; GET /v2/store/orders/* 1/s', 'R').problems.length, 1)
  t.same(parseRules('GET /v2/store/products/catalog 1/4h; * /v2/store/** 5/1s', 'R').problems, [])
  // A pattern is normalised as requests are: a%7Eb is a~b, a trailing / changes nothing.
  const [tilde] = parseRules('GET /v2/a%7Eb/ 1/s', 'R').rules
  t.equal(matchRule(tilde === undefined ? [] : [tilde], 'GET', '/v2/a~b')?.id, 'GET /v2/a%7Eb/')
})

t.test('configuration: rule errors among every other problem; both sources is an error; files', async (t) => {
  const problems = problemsOf({ PORT: 'x', RATE_LIMITS: 'GET /x 1/2d', RATE_LIMIT_COOLDOWN_MS: '5000', RATE_LIMIT_COOLDOWN_MAX_MS: '1000' })
  t.match(problems, [/^PORT: /])
  const typedProblems = problemsOf({ RATE_LIMITS: 'GET /x 1/2d', RATE_LIMIT_COOLDOWN_MS: '5000', RATE_LIMIT_COOLDOWN_MAX_MS: '1000', UPSTREAM_URL: 'nope' })
  t.match(typedProblems, [
    /^UPSTREAM_URL: /,
    /^RATE_LIMITS: rule 1 "GET \/x 1\/2d": limit "1\/2d": the window must be at most 1 day$/,
    /^RATE_LIMIT_COOLDOWN_MS: must not exceed RATE_LIMIT_COOLDOWN_MAX_MS$/
  ])
  t.same(problemsOf({ RATE_LIMITS: 'GET /x 1/s', RATE_LIMITS_FILE: '/etc/rules' }), ['RATE_LIMITS: set either RATE_LIMITS or RATE_LIMITS_FILE, not both'])
  t.match(problemsOf({ RATE_LIMITS_FILE: '/nowhere' }), [/^RATE_LIMITS_FILE: cannot read \/nowhere \(ENOENT\)$/])
  const fromFile = loadConfig({ ...base, RATE_LIMITS_FILE: '/etc/rules' }, () => '# TI\nGET /v2/store/products/catalog 1/4h 6/1d\n\n* /v2/store/** 5/s\n')
  t.same(fromFile.rateLimits.rules.map((r) => r.id), ['GET /v2/store/products/catalog', '* /v2/store/**'])
  t.equal(fromFile.rateLimits.rulesSource, 'RATE_LIMITS_FILE (/etc/rules)')
  t.same(problemsOf({ RATE_LIMITS_FILE: '/etc/rules' }, () => 'GET /x 1/s\nGET y 1/s\n'), ['RATE_LIMITS_FILE (/etc/rules): line 2: path must start with /'])
  t.same(problemsOf({ RATE_LIMITS_FILE: '/etc/rules' }, () => '# budgets\n\nGET /x 1/s 5/q; GET /y 1/s 2/1w\n'), [
    'RATE_LIMITS_FILE (/etc/rules): line 3 (GET /x): limit 2 is not N/WINDOW (e.g. 5/1s, 1/4h, 5/s; units ms, s, m, h, d)',
    'RATE_LIMITS_FILE (/etc/rules): line 3 (GET /y): limit 2 is not N/WINDOW (e.g. 5/1s, 1/4h, 5/s; units ms, s, m, h, d)'
  ], 'a valid method and path are shown, with the line; the limit by its position')
})

t.test('RATE_LIMITS_FILE pointed at the wrong file never echoes it: a secret, or the whole environment', async (t) => {
  const secret = 'Zq8-client-secret-value'
  const environ = `PATH=/usr/bin\0CLIENT_SECRET=${secret}\0HOME=/root\0`
  for (const [name, content] of [['a secret file', `${secret}\n`], ['/proc/self/environ', environ], ['a JSON file', `{"password": "${secret}"}`]]) {
    const problems = problemsOf({ RATE_LIMITS_FILE: '/wrong' }, () => content ?? '')
    t.ok(problems.length > 0, `${name}: refused`)
    t.same(problems.filter((p) => p.includes(secret) || p.includes('CLIENT_SECRET') || p.includes('password')), [], `${name}: nothing of it in the problems`)
    t.match(problems, [/^RATE_LIMITS_FILE \(\/wrong\): line 1: /], `${name}: the line is named`)
  }
})

t.test('configuration: defaults, and the Redis URL checked without ever repeating it', async (t) => {
  const config = loadConfig(base)
  t.same({ ...config.rateLimits, rules: [...config.rateLimits.rules] }, {
    rules: [],
    rulesSource: undefined,
    maxWaitMs: 1000,
    cooldownMs: 1000,
    cooldownMaxMs: 3_600_000,
    redisUrl: undefined,
    redisUrlSource: undefined,
    redisUrlFile: undefined,
    redisTimeoutMs: 200,
    fleetSize: 0,
    aloneMaxMs: 3_600_000,
    headers: true
  })
  const secret = 'Sup3rRedisPass'
  for (const [url, problem] of [
    [`http://:${secret}@redis:6379`, /must be a redis:\/\/ or rediss:\/\/ URL/],
    [`redis://:${secret}@redis:6379/x`, /may only have a database number/],
    [`redis://:${secret}@redis:6379?password=${secret}`, /must not contain a query string/],
    [`redis://:${secret}@[bad`, /is not a valid URL/]
  ] as const) {
    const problems = problemsOf({ RATE_LIMIT_REDIS_URL: url })
    t.match(problems, [problem], url)
    t.notMatch(problems.join('\n'), secret)
  }
  t.same(problemsOf({ RATE_LIMIT_REDIS_URL: 'redis://a:1', RATE_LIMIT_REDIS_URL_FILE: '/f' }),
    ['RATE_LIMIT_REDIS_URL: set either RATE_LIMIT_REDIS_URL or RATE_LIMIT_REDIS_URL_FILE, not both'])
  const fromFile = loadConfig({ ...base, RATE_LIMIT_REDIS_URL_FILE: '/run/secrets/redis' }, () => `rediss://app:${secret}@redis.internal:6380/2\n`)
  t.equal(fromFile.rateLimits.redisUrl, `rediss://app:${secret}@redis.internal:6380/2`)
  const badFile = problemsOf({ RATE_LIMIT_REDIS_URL_FILE: '/run/secrets/redis' }, () => `http://:${secret}@x`)
  t.match(badFile, [/^RATE_LIMIT_REDIS_URL_FILE: in \/run\/secrets\/redis, the URL must be a redis:\/\//])
  t.notMatch(badFile.join(), secret)
})

t.test('IDLE_TIMEOUT_MS must cover RATE_LIMIT_MAX_WAIT_MS too, once rules can make a request wait', async (t) => {
  // Defaults: TOKEN_WAIT_MS 3000 + UPSTREAM_QUEUE_TIMEOUT_MS 5000 + UPSTREAM_TIMEOUT_MS 30000 + RATE_LIMIT_MAX_WAIT_MS 1000.
  t.same(problemsOf({ IDLE_TIMEOUT_MS: '39000' }), [], 'no rules: nothing waits for a budget')
  t.same(problemsOf({ IDLE_TIMEOUT_MS: '39000', RATE_LIMITS: 'GET /x 1/s' }),
    ['IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS + RATE_LIMIT_MAX_WAIT_MS'])
  t.same(problemsOf({ IDLE_TIMEOUT_MS: '39001', RATE_LIMITS: 'GET /x 1/s' }), [])
})
