// `cache=` and `stale=` in RATE_LIMITS: what they mean, and every way to get them wrong.
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'

t.test('cache= and stale= after the limits; rules without them are not cached', async (t) => {
  const { rules, problems } = parseRules('GET /v2/store/products/catalog 1/4h 6/1d cache=4h stale=1d; * /v2/store/** 5/1s; GET /v2/x 5/1s cache=90s', 'RATE_LIMITS')
  t.same(problems, [])
  t.same(rules[0]?.cache, { freshMs: 4 * 3_600_000, staleMs: 86_400_000 })
  t.same(rules[0]?.limits.map((l) => l.text), ['1/4h', '6/1d'])
  t.equal(rules[1]?.cache, undefined)
  t.same(rules[2]?.cache, { freshMs: 90_000, staleMs: 0 })
  t.same(parseRules('* /v2/** 5/1s cache=1ms stale=7d', 'R').rules[0]?.cache, { freshMs: 1, staleMs: 7 * 86_400_000 })
})

t.test('wrong options are named, each with its rule', async (t) => {
  const problems = (text: string): string[] => parseRules(text, 'RATE_LIMITS').problems
  t.match(problems('GET /a 1/1h cache=4x'), [/rule 1 "GET \/a 1\/1h cache=4x": cache="4x" must be a duration from 1ms to 7d/])
  t.match(problems('GET /a 1/1h cache=8d'), [/cache="8d" must be a duration from 1ms to 7d/])
  t.match(problems('GET /a 1/1h cache=0s'), [/cache="0s" must be a duration/])
  t.match(problems('GET /a 1/1h stale=1h'), [/stale= needs cache=/])
  t.match(problems('GET /a 1/1h cache=1h cache=2h'), [/repeats cache=/])
  t.match(problems('POST /a 1/1h cache=1h'), [/cache= applies to GET \(and HEAD\) requests only/])
  t.match(problems('GET /a cache=1h'), [/needs at least one limit/])
  t.match(problems('GET /a 1/1h cachex=1h'), [/limit "cachex=1h" is not N\/WINDOW/])
  // From a file, never the text.
  const fromFile = parseRules('GET /a 1/1h cache=secret', 'RATE_LIMITS_FILE (/r)', { fromFile: true }).problems
  t.match(fromFile, [/line 1 \(GET \/a\): cache= must be a duration/])
  t.notMatch(fromFile.join(), 'secret')
})

t.test('CACHE_ENTRY_MAX_BYTES may not exceed CACHE_MAX_BYTES', async (t) => {
  const env = { AUTH_URL: 'https://auth.example/token', UPSTREAM_URL: 'https://store.example', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
  t.throws(() => loadConfig({ ...env, CACHE_MAX_BYTES: '1048576', CACHE_ENTRY_MAX_BYTES: '2097152' }),
    new ConfigError(['CACHE_ENTRY_MAX_BYTES: must not exceed CACHE_MAX_BYTES']))
  const config = loadConfig(env)
  t.equal(config.cache.maxBytes, 32 * 1024 * 1024)
  t.equal(config.cache.entryMaxBytes, 8 * 1024 * 1024)
})
