import { execFileSync } from 'node:child_process'
import t from 'tap'
import { listenFailure } from '../../src/cli/listen-failure.js'
import { hostsOverlap } from '../../src/config/listeners.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { MAX_DURATION_MS, NODE_TIMER_MAX_MS } from '../../src/config/schema.js'
import { loadCallerConfig, loadStandInConfig } from '../../src/demo/config.js'

const SECRET = 'Zm9v+YmFy/c2VjcmV0='
const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test/store', CLIENT_ID: 'id', CLIENT_SECRET: SECRET }
const noFiles = (path: string): string => { throw Object.assign(new Error(`ENOENT ${path}`), { code: 'ENOENT' }) }

function problemsOf (env: Record<string, string | undefined>, readFile = noFiles): string[] {
  try {
    loadConfig(env, readFile)
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems]
    throw err
  }
  return []
}

t.test('defaults: loopback proxy, admin on all interfaces, documented timeouts', async (t) => {
  const config = loadConfig(base, noFiles)
  t.match(config, {
    token: { authUrl: 'https://auth.example.test', clientId: { value: 'id' }, clientSecret: { value: SECRET }, timeoutMs: 10_000, refreshMarginMs: 300_000, waitMs: 3000 },
    upstream: { url: 'https://api.example.test/store', timeoutMs: 30_000, queueTimeoutMs: 5000, queueLimit: 1000 },
    listener: {
      host: '127.0.0.1',
      port: 8080,
      maxHeaderBytes: 16384,
      maxBodyBytes: 0,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 300_000,
      keepAliveTimeoutMs: 72_000,
      idleTimeoutMs: 120_000,
      accessLog: false
    },
    admin: { host: '0.0.0.0', port: 9090 },
    shutdown: { graceMs: 10_000, delayMs: 0 },
    log: { level: 'info' }
  })
  t.ok(Object.isFrozen(config))
  for (const section of Object.values(config)) if (typeof section === 'object' && section !== null) t.ok(Object.isFrozen(section), 'each section too')
})

t.test('numbers and booleans are coerced from strings', async (t) => {
  const config = loadConfig({ ...base, PORT: '18080', ACCESS_LOG: 'true', TOKEN_TIMEOUT_MS: '2500', LOG_LEVEL: 'debug' }, noFiles)
  t.equal(config.listener.port, 18080)
  t.equal(config.listener.accessLog, true)
  t.equal(config.token.timeoutMs, 2500)
  t.equal(config.log.level, 'debug')
})

t.test('credentials from files are validated at start and re-read later', async (t) => {
  const files: Record<string, string> = { '/run/secrets/id': 'id\n', '/run/secrets/secret': `${SECRET}\n` }
  const config = loadConfig({ ...base, CLIENT_ID: undefined, CLIENT_SECRET: undefined, CLIENT_ID_FILE: '/run/secrets/id', CLIENT_SECRET_FILE: '/run/secrets/secret' },
    (p) => files[p] ?? noFiles(p))
  t.same(config.token.clientId, { file: '/run/secrets/id' })
  t.same(config.token.clientSecret, { file: '/run/secrets/secret' })
})

const cases: Array<[string, Record<string, string | undefined>, RegExp[]]> = [
  ['nothing set', {}, [/^AUTH_URL: is required/, /^UPSTREAM_URL: is required/, /^CLIENT_ID: is required/, /^CLIENT_SECRET: is required/]],
  ['not a URL', { ...base, AUTH_URL: 'auth.example.test' }, [/^AUTH_URL: is not a valid URL/]],
  ['wrong scheme', { ...base, UPSTREAM_URL: 'ftp://api.example.test' }, [/^UPSTREAM_URL: must be an http/]],
  ['credentials in the URL', { ...base, AUTH_URL: 'https://user:pw@auth.example.test' }, [/^AUTH_URL: must not contain credentials/]],
  ['query in the URL', { ...base, UPSTREAM_URL: 'https://api.example.test/?x=1' }, [/^UPSTREAM_URL: must not contain a query/]],
  ['port out of range', { ...base, PORT: '70000' }, [/^PORT: must be at most 65535/]],
  ['port not a number', { ...base, ADMIN_PORT: 'nine' }, [/^ADMIN_PORT: must be a port number, in digits/]],
  ['zero timeout', { ...base, TOKEN_TIMEOUT_MS: '0' }, [/^TOKEN_TIMEOUT_MS: must be at least 1/]],
  ['unknown log level', { ...base, LOG_LEVEL: 'verbose' }, [/^LOG_LEVEL: must be one of fatal, error/]],
  ['both secret forms', { ...base, CLIENT_SECRET_FILE: '/run/secrets/secret' }, [/^CLIENT_SECRET: set either CLIENT_SECRET or CLIENT_SECRET_FILE, not both/]],
  ['unreadable secret file', { ...base, CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: '/nope' }, [/^CLIENT_SECRET_FILE: cannot read \/nope \(ENOENT\)/]],
  ['secret with &', { ...base, CLIENT_SECRET: 'a&b' }, [/^CLIENT_SECRET: character 2 of 3 is an '&': /]],
  ['id with a space', { ...base, CLIENT_ID: 'a b' }, [/^CLIENT_ID: character 2 of 3 is a space: /]],
  ['secret with a trailing newline', { ...base, CLIENT_SECRET: `${'s'.repeat(32)}\n` }, [/^CLIENT_SECRET: character 33 of 33 is a newline: /]],
  ['secret with a tab and more', { ...base, CLIENT_SECRET: 'ab\tc d\r' }, [/^CLIENT_SECRET: character 3 of 7 is a tab \(and 2 more such characters\): /]],
  ['id with a control character', { ...base, CLIENT_ID: 'id\u0007' }, [/^CLIENT_ID: character 3 of 3 is a control character \(U\+0007\)/]],
  ['id with a no-break space', { ...base, CLIENT_ID: 'i\u00a0d' }, [/^CLIENT_ID: character 2 of 3 is a no-break space/]],
  ['full token URL as AUTH_URL', { ...base, AUTH_URL: 'https://transact.ti.com/v1/oauth/accesstoken' },
    [/^AUTH_URL: must not end in \/v1\/oauth\/accesstoken \(the sidecar appends it itself\): set AUTH_URL=https:\/\/transact\.ti\.com$/]],
  ['full token URL with a base path and a slash', { ...base, AUTH_URL: 'https://gw.example.test/ti/v1/oauth/accesstoken/' },
    [/^AUTH_URL: .* set AUTH_URL=https:\/\/gw\.example\.test\/ti$/]],
  ['store path in UPSTREAM_URL', { ...base, UPSTREAM_URL: 'https://transact.ti.com/v2/store/' },
    [/^UPSTREAM_URL: must not end in \/v2\/store \(callers send paths that start with it.*\): set UPSTREAM_URL=https:\/\/transact\.ti\.com$/]],
  ['PORT equals ADMIN_PORT on the default hosts (admin on 0.0.0.0)', { ...base, PORT: '9000', ADMIN_PORT: '9000' },
    [/^PORT: equals ADMIN_PORT \(9000\) on overlapping addresses \(HOST=127\.0\.0\.1, ADMIN_HOST=0\.0\.0\.0\)/]],
  ['PORT equals ADMIN_PORT on localhost and 127.0.0.1', { ...base, PORT: '9000', ADMIN_PORT: '9000', HOST: 'localhost', ADMIN_HOST: '127.0.0.1' },
    [/^PORT: equals ADMIN_PORT/]],
  ['PORT equals ADMIN_PORT on :: and an address', { ...base, PORT: '9000', ADMIN_PORT: '9000', HOST: '::', ADMIN_HOST: '10.0.0.1' },
    [/^PORT: equals ADMIN_PORT/]],
  ['a HOST that is not a host name', { ...base, HOST: 'local host' }, [/^HOST: is neither a host name nor an IP address/]],
  ['an ADMIN_HOST that is a URL', { ...base, ADMIN_HOST: 'http://0.0.0.0' }, [/^ADMIN_HOST: is neither a host name nor an IP address/]],
  ['a duration past Node\'s timer limit', { ...base, TOKEN_TIMEOUT_MS: String(2 ** 31) },
    [/^TOKEN_TIMEOUT_MS: must be at most 86400000 \(one day: Node's timers overflow above 2147483647 ms\)$/]],
  ['headers timeout over the request timeout', { ...base, HEADERS_TIMEOUT_MS: '20000', REQUEST_TIMEOUT_MS: '10000' }, [/^HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS/]],
  ['idle timeout not over the upstream timeout', { ...base, IDLE_TIMEOUT_MS: '30000' }, [/^IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS \+ UPSTREAM_QUEUE_TIMEOUT_MS \+ UPSTREAM_TIMEOUT_MS$/]],
  // The review's settings: a caller queued behind a stalled upstream was cut off with no status line.
  ['idle timeout shorter than the longest silent wait', { ...base, UPSTREAM_TIMEOUT_MS: '2000', IDLE_TIMEOUT_MS: '3000' },
    [/^IDLE_TIMEOUT_MS: must exceed TOKEN_WAIT_MS \+ UPSTREAM_QUEUE_TIMEOUT_MS \+ UPSTREAM_TIMEOUT_MS$/]],
  ['queue limit out of range', { ...base, UPSTREAM_QUEUE_LIMIT: '-1' }, [/^UPSTREAM_QUEUE_LIMIT: must be at least 0/]],
  ['header limit too small', { ...base, MAX_HEADER_BYTES: '100' }, [/^MAX_HEADER_BYTES: must be at least 1024/]],
  ['many at once', { AUTH_URL: 'nope', PORT: '-1', CLIENT_ID: 'x', CLIENT_SECRET: 'y' }, [/^PORT: must be at least 0/, /^AUTH_URL: is not a valid URL/, /^UPSTREAM_URL: is required/]]
]

for (const [name, env, expected] of cases) {
  t.test(`rejected: ${name}`, async (t) => {
    const problems = problemsOf(env)
    t.equal(problems.length, expected.length, problems.join('; '))
    for (const pattern of expected) t.ok(problems.some((p) => pattern.test(p)), `${pattern} in ${JSON.stringify(problems)}`)
  })
}

t.test('hostsOverlap: which listen addresses can collide on one port', async (t) => {
  const cases: Array<[string, string, boolean]> = [
    ['127.0.0.1', '127.0.0.1', true], ['0.0.0.0', '127.0.0.1', true], ['::', '127.0.0.1', true], ['[::]', '::1', true],
    ['0.0.0.0', 'proxy.internal', true], ['localhost', '127.0.0.1', true], ['LOCALHOST', '[::1]', true],
    ['127.0.0.1', '::1', false], ['127.0.0.1', '127.0.0.2', false], ['0.0.0.0', '::1', false], ['10.0.0.1', 'localhost', false]
  ]
  for (const [a, b, overlap] of cases) {
    t.equal(hostsOverlap(a, b), overlap, `${a} ${b}`)
    t.equal(hostsOverlap(b, a), overlap, `${b} ${a}`)
  }
})

t.test('same ports are fine on distinct addresses, and port 0 never collides', async (t) => {
  t.equal(loadConfig({ ...base, PORT: '9000', ADMIN_PORT: '9000', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.2' }, noFiles).listener.port, 9000)
  t.equal(loadConfig({ ...base, PORT: '0', ADMIN_PORT: '0' }, noFiles).listener.port, 0)
  for (const host of ['::1', '[::1]', 'proxy.internal', '10.1.2.3', 'fe80::1%eth0']) {
    t.equal(loadConfig({ ...base, HOST: host }, noFiles).listener.host, host, host)
  }
})

t.test('other base paths are kept: only the exact trailing paths are refused', async (t) => {
  const config = loadConfig({ ...base, AUTH_URL: 'https://gw.example.test/v1/oauth', UPSTREAM_URL: 'https://gw.example.test/v2/store-eu' }, noFiles)
  t.equal(config.token.authUrl, 'https://gw.example.test/v1/oauth')
  t.equal(config.upstream.url, 'https://gw.example.test/v2/store-eu')
})

t.test('a credential file with a bad character names the _FILE variable and the file, never the value', async (t) => {
  const files: Record<string, string> = { '/run/secrets/secret': 'Sup3r secret\n' }
  const problems = problemsOf({ ...base, CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: '/run/secrets/secret' }, (p) => files[p] ?? noFiles(p))
  t.same(problems.length, 1)
  t.match(problems[0], /^CLIENT_SECRET_FILE: in \/run\/secrets\/secret, character 6 of 12 is a space: /)
  t.notMatch(problems.join(), 'Sup3r')
  const empty = problemsOf({ ...base, CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: '/empty' }, () => '\n')
  t.same(empty, ['CLIENT_SECRET_FILE: in /empty, the value is empty'])
})

// A duration above 2^31-1 ms fires after 1 ms in Node's timers.
const DURATIONS = ['TOKEN_TIMEOUT_MS', 'UPSTREAM_TIMEOUT_MS', 'TOKEN_REFRESH_MARGIN_MS', 'TOKEN_WAIT_MS', 'SHUTDOWN_GRACE_MS',
  'SHUTDOWN_DELAY_MS', 'HEADERS_TIMEOUT_MS', 'REQUEST_TIMEOUT_MS', 'KEEP_ALIVE_TIMEOUT_MS', 'IDLE_TIMEOUT_MS', 'UPSTREAM_QUEUE_TIMEOUT_MS',
  'RATE_LIMIT_MAX_WAIT_MS', 'RATE_LIMIT_COOLDOWN_MS', 'RATE_LIMIT_COOLDOWN_MAX_MS', 'RATE_LIMIT_REDIS_TIMEOUT_MS']

t.test('every duration is bounded by one day, well inside Node\'s timers, sums of two included', async (t) => {
  t.ok(2 * MAX_DURATION_MS <= NODE_TIMER_MAX_MS)
  for (const name of DURATIONS) {
    const over = problemsOf({ ...base, [name]: String(MAX_DURATION_MS + 1) })
    t.ok(over.some((p) => p.startsWith(`${name}: must be at most ${MAX_DURATION_MS} (one day`)), `${name}: ${over.join('; ')}`)
    t.ok(problemsOf({ ...base, [name]: String(NODE_TIMER_MAX_MS + 1) }).some((p) => p.startsWith(`${name}: must be at most`)), `${name} past 2^31-1`)
  }
  // At the bound itself every duration loads (the cross-checks need idle > token wait + queue + upstream + rate-limit wait,
  // request >= headers).
  const config = loadConfig({
    ...base,
    ...Object.fromEntries(DURATIONS.map((n) => [n, String(MAX_DURATION_MS)])),
    UPSTREAM_TIMEOUT_MS: String(MAX_DURATION_MS - 4),
    RATE_LIMIT_MAX_WAIT_MS: '1',
    TOKEN_WAIT_MS: '1',
    UPSTREAM_QUEUE_TIMEOUT_MS: '1'
  }, noFiles)
  t.equal(config.token.timeoutMs, MAX_DURATION_MS)
  t.equal(config.shutdown.delayMs + config.shutdown.graceMs <= NODE_TIMER_MAX_MS, true)
})

t.test('the stand-in\'s and the caller\'s durations are bounded too', async (t) => {
  const problems = (load: () => unknown): string[] => {
    try { load() } catch (err) { if (err instanceof ConfigError) return [...err.problems] }
    return []
  }
  t.match(problems(() => loadStandInConfig({ STAND_IN_TOKEN_LIFETIME_MS: String(2 ** 31) })), [/^STAND_IN_TOKEN_LIFETIME_MS: must be at most 86400000 \(one day/])
  t.match(problems(() => loadCallerConfig({ CALLER_INTERVAL_MS: String(2 ** 31) })), [/^CALLER_INTERVAL_MS: must be at most 86400000/])
  t.match(problems(() => loadCallerConfig({ CALLER_TIMEOUT_MS: String(MAX_DURATION_MS + 1) })), [/^CALLER_TIMEOUT_MS: must be at most 86400000/])
  t.equal(loadCallerConfig({ CALLER_TIMEOUT_MS: String(MAX_DURATION_MS) }).timeoutMs, MAX_DURATION_MS)
})

t.test('listenFailure: one line naming the variables and the address, for each kind of failure', async (t) => {
  const names = { host: 'HOST', port: 'PORT' }
  const error = (code: string) => Object.assign(new Error(`listen ${code}`), { code })
  t.equal(listenFailure(names, '127.0.0.1', 8080, error('EADDRINUSE')),
    'PORT=8080 (HOST=127.0.0.1): cannot listen on 127.0.0.1:8080: the address is already in use (another process, or the other listener, holds it) (EADDRINUSE)')
  t.equal(listenFailure({ host: 'ADMIN_HOST', port: 'ADMIN_PORT' }, '::1', 80, error('EACCES')),
    'ADMIN_PORT=80 (ADMIN_HOST=::1): cannot listen on [::1]:80: permission denied (ports below 1024 need privileges) (EACCES)')
  t.equal(listenFailure(names, 'sidecar.invalid', 8080, error('ENOTFOUND')),
    'HOST=sidecar.invalid: cannot listen on sidecar.invalid:8080: the host name does not resolve (ENOTFOUND)')
  t.equal(listenFailure(names, 'sidecar.internal', 8080, error('EAI_AGAIN')),
    'HOST=sidecar.internal: cannot listen on sidecar.internal:8080: the host name could not be resolved (name resolution failed) (EAI_AGAIN)')
  t.equal(listenFailure(names, '203.0.113.7', 8080, error('EADDRNOTAVAIL')),
    "HOST=203.0.113.7: cannot listen on 203.0.113.7:8080: the address is not one of this machine's (EADDRNOTAVAIL)")
  t.equal(listenFailure(names, '127.0.0.1', 8080, new Error('something else')), 'PORT=8080 (HOST=127.0.0.1): cannot listen on 127.0.0.1:8080: something else')
})

t.test('no problem message ever repeats a credential', async (t) => {
  const secret = 'S3cr&t-value'
  const err = t.throws(() => loadConfig({ ...base, CLIENT_SECRET: secret, CLIENT_ID: 'id with space' }, noFiles)) as Error
  t.notMatch(err.message, 'S3cr')
  t.notMatch(err.message, 'id with space')
  t.match(err.message, /^invalid configuration:\n {2}- CLIENT_ID: .*\n {2}- CLIENT_SECRET: /)
})

t.test('check-config on a CLIENT_SECRET_FILE that is a FIFO: a clear problem at once, no hang (the real file reader)', async (t) => {
  const dir = t.testdir({})
  const fifo = `${dir}/secret`
  execFileSync('mkfifo', [fifo])
  const started = performance.now()
  let problems: string[] = []
  try {
    loadConfig({ ...base, CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: fifo })
  } catch (err) {
    problems = [...(err as ConfigError).problems]
  }
  t.ok(performance.now() - started < 1000, 'at once')
  t.match(problems, [/^CLIENT_SECRET_FILE: cannot read .*FIFO/])
})
