// A value is read whole or refused: a whole number is decimal digits, a duration is digits and
// a unit with nothing around them, a Redis database is one number that is the whole path, an
// IPv6 listener address has both brackets or neither, and a wrong option is said once, without
// inventing a second problem the operator did not make.
import t from 'tap'
import { listenHost } from '../../src/config/listeners.js'
import { loadConfig } from '../../src/config/load.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { problemsOf as problems } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
const ruleProblems = (text: string): string[] => parseRules(text, 'RATE_LIMITS').problems

t.test('cache= and stale= take a duration and nothing else: no prefix, no suffix', async (t) => {
  for (const value of ['x4h', '4hx', '-4h', '4h4h', '4 h']) {
    t.not(ruleProblems(`GET /a 1/1h cache=${value}`), [], `cache=${value}`)
    t.not(ruleProblems(`GET /a 1/1h cache=1h stale=${value}`), [], `stale=${value}`)
  }
  t.same(ruleProblems('GET /a 1/1h cache=x4h'), ['RATE_LIMITS: rule 1 "GET /a 1/1h cache=x4h": cache="x4h" must be a duration from 1ms to 7d (e.g. 4h, 30m, 1d)'])
  t.same(ruleProblems('GET /a 1/1h cache=4hx'), ['RATE_LIMITS: rule 1 "GET /a 1/1h cache=4hx": cache="4hx" must be a duration from 1ms to 7d (e.g. 4h, 30m, 1d)'])
  t.same(ruleProblems('GET /a 1/1h cache=1h stale=x2h'), ['RATE_LIMITS: rule 1 "GET /a 1/1h cache=1h stale=x2h": stale="x2h" must be a duration from 1ms to 7d (e.g. 4h, 30m, 1d)'])
  t.same(parseRules('GET /a 1/1h cache=4h stale=30m', 'R').rules[0]?.cache, { freshMs: 4 * 3_600_000, staleMs: 30 * 60_000 })
})

t.test('a wrong cache= is one problem: it is not also called a stale= without cache=', async (t) => {
  for (const value of ['0s', '8d', 'soon']) {
    const rule = `GET /a 1/1h cache=${value}`
    t.same(ruleProblems(rule), [`RATE_LIMITS: rule 1 "${rule}": cache="${value}" must be a duration from 1ms to 7d (e.g. 4h, 30m, 1d)`], rule)
  }
  t.same(ruleProblems('GET /a 1/1h cache=1h cache=2h'), ['RATE_LIMITS: rule 1 "GET /a 1/1h cache=1h cache=2h": repeats cache='])
  // Only when every option given was valid is a missing cache= the problem.
  t.same(ruleProblems('GET /a 1/1h stale=1h'), ['RATE_LIMITS: rule 1 "GET /a 1/1h stale=1h": stale= needs cache= (how long an answer is fresh)'])
})

t.test('a whole-number setting is decimal digits: not blank, hex, an exponent or a sign', async (t) => {
  for (const [name, wording] of [['TOKEN_WAIT_MS', 'a whole number of milliseconds, in digits (30000 is 30 s)'], ['PORT', 'a port number, in digits (0 to 65535)'], ['UPSTREAM_QUEUE_LIMIT', 'a whole number, in digits']] as Array<[string, string]>) {
    for (const value of [' ', '0x10', '1e2', '+8']) t.same(problems(() => loadConfig({ ...base, [name]: value })), [`${name}: must be ${wording}`], `${name}=${JSON.stringify(value)}`)
  }
  t.equal(loadConfig({ ...base, TOKEN_WAIT_MS: ' 250 ' }).token.waitMs, 250)
  // In the schema's order with Ajv's own, whichever finds each.
  t.same(problems(() => loadConfig({ ...base, PORT: '0x10', ADMIN_PORT: 'nine' })), ['PORT: must be a port number, in digits (0 to 65535)', 'ADMIN_PORT: must be a port number, in digits (0 to 65535)'])
})

t.test('a Redis database number is the whole path: nothing before it', async (t) => {
  const redisProblems = (url: string): string[] => problems(() => loadConfig({ ...base, RATE_LIMIT_REDIS_URL: url }))
  const wrong = 'RATE_LIMIT_REDIS_URL: may only have a database number as its path (/0)'
  for (const url of ['redis://h:1/a/1', 'redis://h:1//1', 'redis://h:1/x1']) t.same(redisProblems(url), [wrong], url)
  t.same(redisProblems('redis://h:1/3'), [])
})

t.test('an IPv6 literal with one bracket is neither a host name nor an IP address', async (t) => {
  for (const host of ['[::1', '::1]', '[[::1]]', '[127.0.0.1]']) {
    t.same(problems(() => loadConfig({ ...base, HOST: host, ADMIN_HOST: host })),
      ['HOST: is neither a host name nor an IP address', 'ADMIN_HOST: is neither a host name nor an IP address'], host)
  }
  for (const host of ['[fd00::42]', '[fe80::1%eth0]', '[fe80::1%br-0.1]']) t.equal(loadConfig({ ...base, HOST: host }).listener.host, host, host)
})

t.test('listen() gets the address inside the brackets; anything else as it is', async (t) => {
  t.equal(listenHost('[::1]'), '::1')
  t.equal(listenHost('[fe80::1%eth0]'), 'fe80::1%eth0')
  for (const host of ['::1', '127.0.0.1', 'proxy.internal', '[::1', '::1]']) t.equal(listenHost(host), host, host)
})
