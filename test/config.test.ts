import t from 'tap'
import { ConfigError, loadConfig } from '../src/config.js'

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
    authUrl: 'https://auth.example.test',
    upstreamUrl: 'https://api.example.test/store',
    clientId: { value: 'id' },
    clientSecret: { value: SECRET },
    host: '127.0.0.1',
    port: 8080,
    adminHost: '0.0.0.0',
    adminPort: 9090,
    tokenTimeoutMs: 10_000,
    upstreamTimeoutMs: 30_000,
    tokenRefreshMarginMs: 300_000,
    tokenWaitMs: 3000,
    shutdownGraceMs: 10_000,
    shutdownDelayMs: 0,
    maxHeaderBytes: 16384,
    maxBodyBytes: 0,
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 300_000,
    keepAliveTimeoutMs: 72_000,
    idleTimeoutMs: 120_000,
    accessLog: false,
    logLevel: 'info'
  })
  t.ok(Object.isFrozen(config))
})

t.test('numbers and booleans are coerced from strings', async (t) => {
  const config = loadConfig({ ...base, PORT: '18080', ACCESS_LOG: 'true', TOKEN_TIMEOUT_MS: '2500', LOG_LEVEL: 'debug' }, noFiles)
  t.equal(config.port, 18080)
  t.equal(config.accessLog, true)
  t.equal(config.tokenTimeoutMs, 2500)
  t.equal(config.logLevel, 'debug')
})

t.test('credentials from files are validated at start and re-read later', async (t) => {
  const files: Record<string, string> = { '/run/secrets/id': 'id\n', '/run/secrets/secret': `${SECRET}\n` }
  const config = loadConfig({ ...base, CLIENT_ID: undefined, CLIENT_SECRET: undefined, CLIENT_ID_FILE: '/run/secrets/id', CLIENT_SECRET_FILE: '/run/secrets/secret' },
    (p) => files[p] ?? noFiles(p))
  t.same(config.clientId, { file: '/run/secrets/id' })
  t.same(config.clientSecret, { file: '/run/secrets/secret' })
})

const cases: Array<[string, Record<string, string | undefined>, RegExp[]]> = [
  ['nothing set', {}, [/^AUTH_URL: is required/, /^UPSTREAM_URL: is required/, /^CLIENT_ID: is required/, /^CLIENT_SECRET: is required/]],
  ['not a URL', { ...base, AUTH_URL: 'auth.example.test' }, [/^AUTH_URL: is not a valid URL/]],
  ['wrong scheme', { ...base, UPSTREAM_URL: 'ftp://api.example.test' }, [/^UPSTREAM_URL: must be an http/]],
  ['credentials in the URL', { ...base, AUTH_URL: 'https://user:pw@auth.example.test' }, [/^AUTH_URL: must not contain credentials/]],
  ['query in the URL', { ...base, UPSTREAM_URL: 'https://api.example.test/?x=1' }, [/^UPSTREAM_URL: must not contain a query/]],
  ['port out of range', { ...base, PORT: '70000' }, [/^PORT: must be <= 65535/]],
  ['port not a number', { ...base, ADMIN_PORT: 'nine' }, [/^ADMIN_PORT: must be integer/]],
  ['zero timeout', { ...base, TOKEN_TIMEOUT_MS: '0' }, [/^TOKEN_TIMEOUT_MS: must be >= 1/]],
  ['unknown log level', { ...base, LOG_LEVEL: 'verbose' }, [/^LOG_LEVEL: must be equal to one of the allowed values \(fatal, error/]],
  ['both secret forms', { ...base, CLIENT_SECRET_FILE: '/run/secrets/secret' }, [/^CLIENT_SECRET: set either CLIENT_SECRET or CLIENT_SECRET_FILE, not both/]],
  ['unreadable secret file', { ...base, CLIENT_SECRET: undefined, CLIENT_SECRET_FILE: '/nope' }, [/^CLIENT_SECRET_FILE: cannot read \/nope \(ENOENT\)/]],
  ['secret with &', { ...base, CLIENT_SECRET: 'a&b' }, [/^CLIENT_SECRET: contains whitespace or '&'/]],
  ['id with a space', { ...base, CLIENT_ID: 'a b' }, [/^CLIENT_ID: contains whitespace/]],
  ['headers timeout over the request timeout', { ...base, HEADERS_TIMEOUT_MS: '20000', REQUEST_TIMEOUT_MS: '10000' }, [/^HEADERS_TIMEOUT_MS: must not exceed REQUEST_TIMEOUT_MS/]],
  ['idle timeout not over the upstream timeout', { ...base, IDLE_TIMEOUT_MS: '30000' }, [/^IDLE_TIMEOUT_MS: must exceed UPSTREAM_TIMEOUT_MS/]],
  ['header limit too small', { ...base, MAX_HEADER_BYTES: '100' }, [/^MAX_HEADER_BYTES: must be >= 1024/]],
  ['many at once', { AUTH_URL: 'nope', PORT: '-1', CLIENT_ID: 'x', CLIENT_SECRET: 'y' }, [/^PORT: must be >= 0/, /^AUTH_URL: is not a valid URL/, /^UPSTREAM_URL: is required/]]
]

for (const [name, env, expected] of cases) {
  t.test(`rejected: ${name}`, async (t) => {
    const problems = problemsOf(env)
    t.equal(problems.length, expected.length, problems.join('; '))
    for (const pattern of expected) t.ok(problems.some((p) => pattern.test(p)), `${pattern} in ${JSON.stringify(problems)}`)
  })
}

t.test('no problem message ever repeats a credential', async (t) => {
  const secret = 'S3cr&t-value'
  const err = t.throws(() => loadConfig({ ...base, CLIENT_SECRET: secret, CLIENT_ID: 'id with space' }, noFiles)) as Error
  t.notMatch(err.message, 'S3cr')
  t.notMatch(err.message, 'id with space')
  t.match(err.message, /^invalid configuration:\n {2}- CLIENT_ID: .*\n {2}- CLIENT_SECRET: /)
})
