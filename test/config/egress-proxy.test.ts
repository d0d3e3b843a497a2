// The egress proxy variables, parsed once in config (every listener bounded, case 4): what check-config accepts,
// serve can use. A `%` that does not start an escape in the user or password is a configuration
// error naming the variable, never its value.
import t from 'tap'
import { basicCredentials, defaultPort, EGRESS_VARIABLES, loadEgressProxy, NO_EGRESS_PROXY, parseProxyUrl, proxyDisplayUrl } from '../../src/config/egress-proxy.js'
import { loadConfig } from '../../src/config/load.js'
import type { ConfigError } from '../../src/config/parse-env.js'
import { BAD_ESCAPE, userInfo } from '../../src/config/url-credentials.js'

const basic = (pair: string): string => `Basic ${Buffer.from(pair).toString('base64')}`

t.test('each variable, lower case first, trimmed, empty as unset; shown without credentials; its Basic credentials decoded', async (t) => {
  const cases: Array<[string, Record<string, string>, { https?: [string, string, string | undefined], http?: [string, string, string | undefined], noProxy?: string }]> = [
    ['none', {}, {}],
    ['upper case', { HTTPS_PROXY: 'http://proxy.corp:3128' }, { https: ['http://proxy.corp:3128', 'HTTPS_PROXY', undefined] }],
    ['lower case first', { https_proxy: 'http://lower:1', HTTPS_PROXY: 'http://upper:2' }, { https: ['http://lower:1', 'https_proxy', undefined] }],
    ['blank lower case falls back', { https_proxy: '  ', HTTPS_PROXY: ' http://upper:2 ' }, { https: ['http://upper:2', 'HTTPS_PROXY', undefined] }],
    ['HTTP_PROXY alone', { http_proxy: 'proxy.corp:8080' }, { http: ['http://proxy.corp:8080', 'http_proxy', undefined] }],
    ['HTTP_PROXY upper', { HTTP_PROXY: 'HTTPS://Proxy.Corp' }, { http: ['https://proxy.corp:443', 'HTTP_PROXY', undefined] }],
    ['user and password, escapes decoded', { HTTPS_PROXY: 'http://us%65r:50%25off@proxy:3128' }, { https: ['http://proxy:3128', 'HTTPS_PROXY', basic('user:50%off')] }],
    ['user alone', { HTTPS_PROXY: 'http://user@proxy' }, { https: ['http://proxy:80', 'HTTPS_PROXY', basic('user:')] }],
    ['password alone', { HTTPS_PROXY: 'http://:pw@proxy' }, { https: ['http://proxy:80', 'HTTPS_PROXY', basic(':pw')] }],
    ['unicode password', { HTTPS_PROXY: 'http://u:pässwörd@proxy' }, { https: ['http://proxy:80', 'HTTPS_PROXY', basic('u:pässwörd')] }],
    ['NO_PROXY, lower case first', { no_proxy: ' .corp ', NO_PROXY: '*' }, { noProxy: '.corp' }],
    ['NO_PROXY upper', { NO_PROXY: '*' }, { noProxy: '*' }]
  ]
  for (const [name, env, want] of cases) {
    const problems: string[] = []
    const egress = loadEgressProxy(env, problems)
    t.same(problems, [], `${name}: no problem`)
    t.ok(Object.isFrozen(egress), `${name}: frozen`)
    for (const [key, got, expected] of [['https', egress.httpsProxy, want.https], ['http', egress.httpProxy, want.http]] as const) {
      t.same(got === undefined ? undefined : [got.display, got.from, got.authorization], expected, `${name}: ${key}`)
      if (got !== undefined) t.ok(Object.isFrozen(got), `${name}: ${key} frozen`)
    }
    t.equal(egress.noProxy, want.noProxy ?? '', `${name}: NO_PROXY`)
  }
  t.equal(loadEgressProxy({ HTTPS_PROXY: 'http://u:p@proxy:3128' }, []).httpsProxy?.href, 'http://u:p@proxy:3128/', 'href keeps the credentials, for the connection only')
})

t.test('refused, naming the variable and never the value: not a URL, not http(s), a bad % escape', async (t) => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ HTTPS_PROXY: 'socks5://u:hunter2@proxy:1080' }, 'HTTPS_PROXY: must be http://[user:password@]host[:port] or https://… (the value is not shown: it may hold a password)'],
    [{ https_proxy: 'http://[hunter2' }, 'https_proxy: must be http://'],
    [{ HTTP_PROXY: 'ftp://hunter2' }, 'HTTP_PROXY: must be http://'],
    [{ HTTPS_PROXY: 'http://user:50%off@proxy:3128' }, `HTTPS_PROXY: ${BAD_ESCAPE}`],
    [{ http_proxy: 'http://hunter%2@proxy' }, `http_proxy: ${BAD_ESCAPE}`],
    [{ HTTPS_PROXY: 'http://u:%ff%fe@proxy' }, `HTTPS_PROXY: ${BAD_ESCAPE}`]
  ]
  for (const [env, message] of cases) {
    const problems: string[] = []
    const egress = loadEgressProxy(env, problems)
    t.equal(problems.length, 1, JSON.stringify(env))
    t.match(problems[0], message)
    t.notMatch(problems[0] ?? '', /hunter|off@|%ff/)
    t.equal(egress.httpsProxy, undefined)
    t.equal(egress.httpProxy, undefined)
  }
  const both: string[] = []
  loadEgressProxy({ HTTPS_PROXY: 'ftp://a', HTTP_PROXY: 'http://a:%zz@b' }, both)
  t.same(both.map((p) => p.split(':')[0]), ['HTTPS_PROXY', 'HTTP_PROXY'], 'each named')
})

t.test('check-config\'s parse names HTTPS_PROXY for `http://user:50%off@proxy:3128`', async (t) => {
  const base = { CLIENT_ID: 'a', CLIENT_SECRET: 'b', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  const problems = (): readonly string[] => {
    try {
      loadConfig({ ...base, HTTPS_PROXY: 'http://user:50%off@proxy:3128' })
      return []
    } catch (err) {
      return (err as ConfigError).problems
    }
  }
  t.same(problems(), [`HTTPS_PROXY: ${BAD_ESCAPE}`])
  t.equal(loadConfig({ ...base, HTTPS_PROXY: 'http://user:50%25off@proxy:3128' }).egress.httpsProxy?.authorization, basic('user:50%off'))
})

t.test('parseProxyUrl, proxyDisplayUrl, defaultPort, basicCredentials, userInfo', async (t) => {
  t.equal(parseProxyUrl('ftp://x'), undefined)
  t.equal(parseProxyUrl('a1+b.c-d://x'), undefined, 'any scheme is read as a scheme')
  t.equal(parseProxyUrl('http://'), undefined)
  t.equal(parseProxyUrl('proxy:3128')?.href, 'http://proxy:3128/', 'no scheme: http')
  t.equal(parseProxyUrl('HTTPS://p')?.protocol, 'https:')
  t.equal(proxyDisplayUrl(parseProxyUrl('HTTP://Proxy.Corp:3128') as URL), 'http://proxy.corp:3128')
  t.equal(proxyDisplayUrl(parseProxyUrl('http://[fd00::1]') as URL), 'http://[fd00::1]:80')
  t.equal(defaultPort('https:'), '443')
  t.equal(defaultPort('http:'), '80')
  t.equal(basicCredentials({ username: '', password: '' }), undefined)
  t.equal(basicCredentials({ username: 'a', password: '' }), basic('a:'))
  t.equal(basicCredentials({ username: '', password: 'b' }), basic(':b'))
  t.same(userInfo(new URL('http://a%20b:c%3Ad@h')), { username: 'a b', password: 'c:d' })
  t.equal(userInfo(new URL('http://a:c%@h')), undefined)
  t.same(EGRESS_VARIABLES, ['HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY'])
  t.same(NO_EGRESS_PROXY, { httpsProxy: undefined, httpProxy: undefined, noProxy: '' })
  t.ok(Object.isFrozen(NO_EGRESS_PROXY))
})

t.test('RATE_LIMIT_REDIS_URL (or its file) with a bad % escape is named; a good escape passes', async (t) => {
  const base = { CLIENT_ID: 'a', CLIENT_SECRET: 'b', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  const problems = (env: Record<string, string>, read?: (path: string) => string): readonly string[] => {
    try {
      loadConfig({ ...base, ...env }, read)
      return []
    } catch (err) {
      return (err as ConfigError).problems
    }
  }
  t.same(problems({ RATE_LIMIT_REDIS_URL: 'redis://user:50%off@127.0.0.1:6379' }), [`RATE_LIMIT_REDIS_URL: ${BAD_ESCAPE}`])
  t.same(problems({ RATE_LIMIT_REDIS_URL_FILE: '/run/redis-url' }, () => 'redis://:50%off@127.0.0.1:6379\n'), [`RATE_LIMIT_REDIS_URL_FILE: ${BAD_ESCAPE}`])
  t.same(problems({ RATE_LIMIT_REDIS_URL: 'redis://user:50%25off@127.0.0.1:6379' }), [])
  t.same(problems({}), [])
})
