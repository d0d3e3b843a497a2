// RATE_LIMITS(_FILE) and RATE_LIMIT_REDIS_URL(_FILE) as an operator writes them: an empty
// value is no value, a file's content is trimmed, an unreadable file is named with why,
// every Redis URL problem is said without the URL, and what /status shows of the URL.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { parseEnv } from '../../src/config/parse-env.js'
import { schema, type RawEnv } from '../../src/config/schema.js'
import { checkRateLimits, redisDisplayUrl, rereadRedisUrl } from '../../src/config/rate-limits.js'
import { SecretFileError } from '../../src/config/secret-file.js'
import { problemsOf as problems } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
const files = (content: Record<string, string>) => (path: string): string => {
  const text = content[path]
  if (text === undefined) throw Object.assign(new Error(`no file ${path}`), { code: 'ENOENT' })
  return text
}

const problemsOf = (env: Record<string, string>, readFile = files({})): string[] => problems(() => loadConfig({ ...base, ...env }, readFile))

t.test('an empty value is no value: with the other variable set, not both', async (t) => {
  const read = files({ '/f': 'redis://from-file:1\n', '/rules': 'GET /x 1/s\n' })
  const viaFile = loadConfig({ ...base, RATE_LIMIT_REDIS_URL: '', RATE_LIMIT_REDIS_URL_FILE: '/f' }, read).rateLimits
  t.match(viaFile, { redisUrl: 'redis://from-file:1', redisUrlSource: 'RATE_LIMIT_REDIS_URL_FILE (/f)', redisUrlFile: '/f' })
  const viaValue = loadConfig({ ...base, RATE_LIMIT_REDIS_URL: 'redis://inline:2', RATE_LIMIT_REDIS_URL_FILE: '' }, read).rateLimits
  t.match(viaValue, { redisUrl: 'redis://inline:2', redisUrlSource: 'RATE_LIMIT_REDIS_URL' })
  t.equal(viaValue.redisUrlFile, undefined, 'no file to re-read')
  const neither = loadConfig({ ...base, RATE_LIMIT_REDIS_URL: '', RATE_LIMIT_REDIS_URL_FILE: '' }, read).rateLimits
  t.same([neither.redisUrl, neither.redisUrlSource, neither.redisUrlFile], [undefined, undefined, undefined])

  const rulesFromFile = loadConfig({ ...base, RATE_LIMITS: '  ', RATE_LIMITS_FILE: '/rules' }, read).rateLimits
  t.same([rulesFromFile.rules.map((r) => r.id), rulesFromFile.rulesSource], [['GET /x'], 'RATE_LIMITS_FILE (/rules)'], 'blank RATE_LIMITS beside a file')
  const inline = loadConfig({ ...base, RATE_LIMITS: 'GET /y 1/s', RATE_LIMITS_FILE: '' }, read).rateLimits
  t.same([inline.rules.map((r) => r.id), inline.rulesSource], [['GET /y'], 'RATE_LIMITS'])
  const blank = loadConfig({ ...base, RATE_LIMITS: ' \n ' }, read).rateLimits
  t.same([blank.rules, blank.rulesSource], [[], undefined], 'blank RATE_LIMITS alone: no rules')
})

t.test('a Redis URL file: its content trimmed, spaces too', async (t) => {
  const config = loadConfig({ ...base, RATE_LIMIT_REDIS_URL_FILE: '/f' }, files({ '/f': '  redis://h:1/0 \r\n' }))
  t.equal(config.rateLimits.redisUrl, 'redis://h:1/0')
  t.equal(rereadRedisUrl('/f', files({ '/f': ' redis://h:2 \n' })), 'redis://h:2', 're-read the same way')
  t.equal(rereadRedisUrl('/f', files({ '/f': 'http://h:2' })), undefined, 're-read, not a Redis URL: the one in use stays')
  t.equal(rereadRedisUrl('/f', files({})), undefined, 're-read, unreadable: the one in use stays')
})

t.test('unreadable files: named, with why, never their content', async (t) => {
  const secretFileError = (path: string): string => { throw new SecretFileError(path, 'is larger than 64 KiB') }
  const noCode = (): string => { throw new Error('strange') }
  t.same(problemsOf({ RATE_LIMIT_REDIS_URL_FILE: '/f' }), ['RATE_LIMIT_REDIS_URL_FILE: cannot read /f (ENOENT)'])
  t.same(problemsOf({ RATE_LIMIT_REDIS_URL_FILE: '/f' }, secretFileError), ['RATE_LIMIT_REDIS_URL_FILE: cannot read /f: is larger than 64 KiB'])
  t.same(problemsOf({ RATE_LIMIT_REDIS_URL_FILE: '/f' }, noCode), ['RATE_LIMIT_REDIS_URL_FILE: cannot read /f (error)'])
  t.same(problemsOf({ RATE_LIMITS_FILE: '/r' }, secretFileError), ['RATE_LIMITS_FILE: cannot read /r: is larger than 64 KiB'])
  t.same(problemsOf({ RATE_LIMITS_FILE: '/r' }, noCode), ['RATE_LIMITS_FILE: cannot read /r (error)'])
})

t.test('every Redis URL problem, word for word, none repeating the URL', async (t) => {
  const cases: Array<[string, string | undefined]> = [
    ['redis://', 'must name a host'],
    ['redis://h:1?db=1', 'must not contain a query string or fragment'],
    ['redis://h:1#primary', 'must not contain a query string or fragment'],
    ['redis://h:1/1a', 'may only have a database number as its path (/0)'],
    ['redis://h:1/a1', 'may only have a database number as its path (/0)'],
    ['redis://h:1/0/', 'may only have a database number as its path (/0)'],
    ['redis://h:1/', undefined],
    ['redis://h:1/12', undefined],
    ['rediss://h', undefined]
  ]
  for (const [url, problem] of cases) t.same(problemsOf({ RATE_LIMIT_REDIS_URL: url }), problem === undefined ? [] : [`RATE_LIMIT_REDIS_URL: ${problem}`], url)
})

t.test('the Redis URL as /status and the logs show it: scheme, host and port only', async (t) => {
  t.equal(redisDisplayUrl('redis://:pw@h'), 'redis://h:6379', 'the default port said')
  t.equal(redisDisplayUrl('rediss://user:pw@h:6380/2'), 'rediss://h:6380')
  t.equal(redisDisplayUrl('not a url'), 'redis://(invalid)')
})

t.test('the cool-down and cache bounds may be equal; the settings are only returned typed and without problems of their own', async (t) => {
  t.same(problemsOf({ RATE_LIMIT_COOLDOWN_MS: '5000', RATE_LIMIT_COOLDOWN_MAX_MS: '5000', CACHE_ENTRY_MAX_BYTES: '1048576', CACHE_MAX_BYTES: '1048576' }), [])
  const raw = parseEnv(schema, { ...base, RATE_LIMITS: 'GET /x 1/s' }) as RawEnv
  const earlier = ['PORT: an earlier problem']
  t.match(checkRateLimits(raw, true, files({}), earlier), { rulesSource: 'RATE_LIMITS' }, 'problems found before are not its own')
  t.equal(earlier.length, 1)
  t.equal(checkRateLimits(raw, false, files({}), []), undefined, 'untyped: nothing returned')
  const own: string[] = []
  t.equal(checkRateLimits(parseEnv(schema, { ...base, RATE_LIMITS: 'GET /x 5/q' }) as RawEnv, true, files({}), own), undefined)
  t.equal(own.length, 1)
})

t.test('RATE_LIMIT_ALONE_MAX_MS: as set, else the longest window of the rules + an hour', async (t) => {
  const hour = 3_600_000
  t.equal(loadConfig({ ...base, RATE_LIMITS: 'GET /c 1/4h 6/1d; * /** 5/1s' }).rateLimits.aloneMaxMs, 24 * hour + hour, 'the longest window is 1d')
  t.equal(loadConfig({ ...base, RATE_LIMITS: '* /** 5/1s' }).rateLimits.aloneMaxMs, 1_000 + hour)
  t.equal(loadConfig({ ...base }).rateLimits.aloneMaxMs, hour, 'no rules')
  t.equal(loadConfig({ ...base, RATE_LIMITS: '* /** 5/1s', RATE_LIMIT_ALONE_MAX_MS: '60000' }).rateLimits.aloneMaxMs, 60_000)
  t.same(problemsOf({ RATE_LIMIT_ALONE_MAX_MS: '-1' }), ['RATE_LIMIT_ALONE_MAX_MS: must be at least 0'])
})
