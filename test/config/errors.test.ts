// Configuration errors are the operator's front door: each names the variable, says what is
// allowed, and never repeats a credential. Every message here is asserted whole.
import t, { type Test } from 'tap'
import { hostsOverlap } from '../../src/config/listeners.js'
import { loadConfig, type Config } from '../../src/config/load.js'
import { problemsOf as problemsIn } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test/store', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
type Env = Record<string, string | undefined>
const noFiles = (path: string): string => { throw Object.assign(new Error(`ENOENT ${path}`), { code: 'ENOENT' }) }
const filesOf = (files: Record<string, string>) => (path: string): string => files[path] ?? noFiles(path)

const problemsOf = (env: Env, readFile = noFiles): string[] => problemsIn(() => loadConfig(env, readFile))

/** Each case: the environment (over `base`), the files, and every problem, word for word. */
function refused (t: Test, cases: Array<[string, Env, string[], Record<string, string>?]>): void {
  for (const [name, env, problems, files = {}] of cases) {
    t.same(problemsOf({ ...base, ...env }, filesOf(files)), problems, name)
  }
}
function loads (env: Env, files: Record<string, string> = {}): Config {
  return loadConfig({ ...base, ...env }, filesOf(files))
}

const FORM = ": the contract's unencoded form body cannot carry whitespace, '&' or control characters"

t.test('credentials: where the bad character is and what it is, never the value', async (t) => {
  refused(t, [
    ['one more after the first: singular', { CLIENT_ID: 'a b&c' }, [`CLIENT_ID: character 2 of 5 is a space (and 1 more such character)${FORM}`]],
    ['two more: plural', { CLIENT_ID: 'a b&c d' }, [`CLIENT_ID: character 2 of 7 is a space (and 2 more such characters)${FORM}`]],
    ['a carriage return', { CLIENT_SECRET: 'sec\rret' }, [`CLIENT_SECRET: character 4 of 7 is a carriage return${FORM}`]],
    // Whitespace beyond the named kinds is named by its code point, in the form Unicode writes it.
    ['a form feed', { CLIENT_SECRET: 'sec\fret' }, [`CLIENT_SECRET: character 4 of 7 is a whitespace character (U+000C)${FORM}`]],
    ['an em space', { CLIENT_SECRET: 'sec\u2003ret' }, [`CLIENT_SECRET: character 4 of 7 is a whitespace character (U+2003)${FORM}`]],
    ['an escape', { CLIENT_ID: '\u001bid' }, [`CLIENT_ID: character 1 of 3 is a control character (U+001B)${FORM}`]],
    ['a delete', { CLIENT_ID: 'id\u007f' }, [`CLIENT_ID: character 3 of 3 is a control character (U+007F)${FORM}`]]
  ])
})

t.test('credentials: one source each, and an empty variable is as if unset', async (t) => {
  refused(t, [
    ['both CLIENT_ID and CLIENT_ID_FILE', { CLIENT_ID_FILE: '/run/secrets/id' }, ['CLIENT_ID: set either CLIENT_ID or CLIENT_ID_FILE, not both'],
      { '/run/secrets/id': 'id\n' }],
    ['an empty CLIENT_ID and no file', { CLIENT_ID: '' }, ['CLIENT_ID: is required (or CLIENT_ID_FILE)']],
    ['an empty CLIENT_SECRET and an empty file variable', { CLIENT_SECRET: '', CLIENT_SECRET_FILE: '' }, ['CLIENT_SECRET: is required (or CLIENT_SECRET_FILE)']]
  ])
  // CLIENT_ID with an empty CLIENT_ID_FILE: the value is used and no file is read.
  t.same(loads({ CLIENT_ID_FILE: '' }).token.clientId, { value: 'id' })
  t.same(loads({ CLIENT_ID: '', CLIENT_ID_FILE: '/run/secrets/id' }, { '/run/secrets/id': 'id\n' }).token.clientId, { file: '/run/secrets/id' })
})

t.test('credential files: one trailing newline (LF or CRLF) is not part of the value; anything else is', async (t) => {
  const fromFile = { CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: '/run/secrets/secret' }
  for (const content of ['secret', 'secret\n', 'secret\r\n']) {
    t.same(loads(fromFile, { '/run/secrets/secret': content }).token.clientSecret, { file: '/run/secrets/secret' }, JSON.stringify(content))
  }
  const bad = (content: string): string[] => problemsOf({ ...base, ...fromFile }, filesOf({ '/run/secrets/secret': content }))
  t.same(bad(''), ['CLIENT_SECRET_FILE: in /run/secrets/secret, the value is empty'])
  t.same(bad('\r\n'), ['CLIENT_SECRET_FILE: in /run/secrets/secret, the value is empty'])
  t.same(bad('secret\n\n'), [`CLIENT_SECRET_FILE: in /run/secrets/secret, character 7 of 7 is a newline${FORM}`])
  t.same(bad('secret\r'), [`CLIENT_SECRET_FILE: in /run/secrets/secret, character 7 of 7 is a carriage return${FORM}`])
  // A value on two lines: only the last newline goes, the first is refused where it is.
  t.same(bad('sec\nret\n'), [`CLIENT_SECRET_FILE: in /run/secrets/secret, character 4 of 7 is a newline${FORM}`])
  // A file that fails to read names its variable, its path and the error's code (or "error"), never content.
  const unreadable = (path: string): string => { throw new Error(`cannot open ${path}: secret`) }
  t.same(problemsOf({ ...base, ...fromFile }, unreadable), ['CLIENT_SECRET_FILE: cannot read /run/secrets/secret (error)'])
})

t.test('URLs: no credentials of any kind, no query or fragment, no trailing slash', async (t) => {
  refused(t, [
    ['an empty AUTH_URL', { AUTH_URL: '' }, ['AUTH_URL: is required']],
    ['only a user', { AUTH_URL: 'https://user@auth.example.test' }, ['AUTH_URL: must not contain credentials']],
    ['only a password', { UPSTREAM_URL: 'https://:pw@api.example.test' }, ['UPSTREAM_URL: must not contain credentials']],
    ['a fragment', { UPSTREAM_URL: 'https://api.example.test/store#top' }, ['UPSTREAM_URL: must not contain a query string or fragment']],
    ['a query', { AUTH_URL: 'https://auth.example.test/?realm=ti' }, ['AUTH_URL: must not contain a query string or fragment']]
  ])
  t.equal(loads({ UPSTREAM_URL: 'https://api.example.test/store//' }).upstream.url, 'https://api.example.test/store')
  t.equal(loads({ AUTH_URL: 'https://auth.example.test/' }).token.authUrl, 'https://auth.example.test')
})

t.test('URLs ending in the path the sidecar adds: the message shows the URL to set, without trailing slashes', async (t) => {
  const token = '/v1/oauth/accesstoken'
  const why = '(the sidecar appends it itself)'
  refused(t, [
    ['the token path', { AUTH_URL: `https://gw.example.test/ti${token}` }, [`AUTH_URL: must not end in ${token} ${why}: set AUTH_URL=https://gw.example.test/ti`]],
    ['in capitals', { AUTH_URL: 'https://gw.example.test/V1/OAuth/AccessToken' }, [`AUTH_URL: must not end in ${token} ${why}: set AUTH_URL=https://gw.example.test`]],
    ['after a doubled slash', { AUTH_URL: `https://gw.example.test/ti/${token}` }, [`AUTH_URL: must not end in ${token} ${why}: set AUTH_URL=https://gw.example.test/ti`]],
    ['after three slashes', { AUTH_URL: `https://gw.example.test/ti//${token}//` }, [`AUTH_URL: must not end in ${token} ${why}: set AUTH_URL=https://gw.example.test/ti`]]
  ])
})

t.test('listener hosts: names and IP literals only', async (t) => {
  const label63 = 'a'.repeat(63)
  for (const host of ['a', 'x.y', 'proxy.a', `${label63}.internal`, 'store-auth-proxy-0', '3com.com', 'proxy.internal.',
    '10.0.0.1', '255.255.255.255', '::', '[::]', 'fd00::42', '[2001:db8::10]', '::ffff:10.0.0.1']) {
    t.equal(loads({ HOST: host }).listener.host, host, host)
  }
  // A label is at most 63 characters; a dotted quad has parts of at most 3 digits, and a name
  // never ends in an all-digit label (`8080` is a port, `10.0.0.1000` a mistyped address).
  for (const host of [`${label63}a.internal`, `proxy.${label63}a`, '10.0.0.1000', '1000.0.0.1', '10.0.0', '8080', '127.1', '10.0.0.1.']) {
    t.same(problemsOf({ ...base, HOST: host }), ['HOST: is neither a host name nor an IP address'], host)
  }
  t.same(problemsOf({ ...base, ADMIN_HOST: '9090' }), ['ADMIN_HOST: is neither a host name nor an IP address'])
})

t.test('listener hosts: every spelling of the IPv6 any-address overlaps everything', async (t) => {
  for (const any of ['::', '[::]', '::0', '[::0]', '0:0:0:0:0:0:0:0', '[0:0:0:0:0:0:0:0]']) {
    for (const other of ['10.0.0.1', 'fd00::42', 'proxy.internal']) {
      t.equal(hostsOverlap(any, other), true, `${any} ${other}`)
      t.equal(hostsOverlap(other, any), true, `${other} ${any}`)
    }
  }
  t.same(problemsOf({ ...base, PORT: '9000', ADMIN_PORT: '9000', HOST: '0:0:0:0:0:0:0:0', ADMIN_HOST: '10.0.0.1' }),
    ['PORT: equals ADMIN_PORT (9000) on overlapping addresses (HOST=0:0:0:0:0:0:0:0, ADMIN_HOST=10.0.0.1): the two listeners need different ports'])
  t.equal(loads({ PORT: '9000', ADMIN_PORT: '9000', HOST: '::1', ADMIN_HOST: '10.0.0.1' }).listener.port, 9000)
})

t.test('MEMORY_LIMIT_BYTES: 0 (no limit) or at least 32 MiB', async (t) => {
  const MiB = 1024 * 1024
  const tooLow = ['MEMORY_LIMIT_BYTES: must be 0 (no limit) or at least 33554432 (32 MiB): below it the sidecar would shed every request']
  refused(t, [
    ['one byte', { MEMORY_LIMIT_BYTES: '1' }, tooLow],
    ['one byte short', { MEMORY_LIMIT_BYTES: String(32 * MiB - 1) }, tooLow]
  ])
  t.equal(loads({ MEMORY_LIMIT_BYTES: String(32 * MiB) }).overload.memoryLimitBytes, 32 * MiB)
  t.equal(loads({ MEMORY_LIMIT_BYTES: '0' }).overload.memoryLimitBytes, 0)
  t.equal(loads({}).overload.memoryLimitBytes, undefined)
})

t.test('IDLE_TIMEOUT_MS must exceed every wait a silent request can sit through', async (t) => {
  // Defaults: TOKEN_WAIT_MS 3000 + UPSTREAM_QUEUE_TIMEOUT_MS 5000 + UPSTREAM_TIMEOUT_MS 30000 = 38000;
  // with rate-limit rules RATE_LIMIT_MAX_WAIT_MS (1000) is a wait too: 39000.
  const sum = 'IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS + UPSTREAM_QUEUE_TIMEOUT_MS + UPSTREAM_TIMEOUT_MS'
  const withRules = `${sum} + RATE_LIMIT_MAX_WAIT_MS`
  const rules = { RATE_LIMITS: '* /v2/store/** 5/s' }
  const rulesFile = { RATE_LIMITS_FILE: '/etc/rules' }
  const files = { '/etc/rules': '* /v2/store/** 5/s\n' }
  refused(t, [
    ['equal to the sum, no rules', { IDLE_TIMEOUT_MS: '38000' }, [sum]],
    ['equal to the sum, RATE_LIMITS', { ...rules, IDLE_TIMEOUT_MS: '39000' }, [withRules]],
    ['equal to the sum, RATE_LIMITS_FILE alone', { ...rulesFile, IDLE_TIMEOUT_MS: '39000' }, [withRules], files],
    ['blank RATE_LIMITS is no rules', { RATE_LIMITS: '  ', IDLE_TIMEOUT_MS: '38000' }, [sum]]
  ])
  t.equal(loads({ IDLE_TIMEOUT_MS: '38001' }).listener.idleTimeoutMs, 38001)
  t.equal(loads({ ...rules, IDLE_TIMEOUT_MS: '39001' }).listener.idleTimeoutMs, 39001)
  t.equal(loads({ ...rulesFile, IDLE_TIMEOUT_MS: '39001' }, files).listener.idleTimeoutMs, 39001)
})
