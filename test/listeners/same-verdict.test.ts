// check-config and serve run the same checks (every listener bounded, case 4): fed the same hostile proxy and
// Redis URLs (`%`, `@`, `:`, brackets, unicode), the two reach the same verdict, and serve never
// fails with anything but a configuration error naming the variable: never a stack trace.
// In-process here (serve's build, without listening or asking for anything: no traffic leaves);
// the processes themselves below, for the cases of the issue.
import fc from 'fast-check'
import t from 'tap'
import { buildApp } from '../../src/app.js'
import { describe } from '../../src/cli/serve.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { captureLogs } from '../helpers/logs.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'

// Each serve verdict builds a whole sidecar (some 100-300 ms on a busy machine).
t.setTimeout(240_000)

const BASE = { CLIENT_ID: 'id', CLIENT_SECRET: 'secret', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example', PORT: '0', ADMIN_PORT: '0' }

type Verdict = { valid: true } | { valid: false, problems: readonly string[] }

function checkConfig (env: Record<string, string>): Verdict {
  try {
    loadConfig(env)
    return { valid: true }
  } catch (err) {
    if (err instanceof ConfigError) return { valid: false, problems: err.problems }
    throw err
  }
}

/** serve up to listening: the config, the app built (its pools, the Redis client), the start line. */
async function serveVerdict (env: Record<string, string>): Promise<Verdict> {
  let config
  try {
    config = loadConfig(env)
  } catch (err) {
    if (err instanceof ConfigError) return { valid: false, problems: err.problems }
    throw err
  }
  const app = await buildApp(config, { log: captureLogs('silent').log, defaultMetrics: false, memory: { readPrivateBytes: () => undefined } })
  JSON.stringify(describe(config))
  await app.close()
  return { valid: true }
}

const piece = fc.constantFrom('%', '%2', '%25', '%zz', '%ff', '@', ':', '[', ']', 'a', '50', 'off', 'ö', '😀', '/', '?', '#', ' ', '\\', '%40', '%3A')
const userinfo = fc.option(fc.array(piece, { maxLength: 6 }).map((p) => `${p.join('')}@`), { nil: '' })
const host = fc.constantFrom('proxy', '127.0.0.1', '[::1]', '[fe80::1%25eth0]', 'prøxy.corp', 'a..b', 'xn--', '%70roxy', '')
const port = fc.constantFrom('', ':3128', ':0', ':65535', ':65536', ':x', ':')

t.test('hostile egress proxy URLs: the same verdict from check-config and serve, never a crash', async (t) => {
  const scheme = fc.constantFrom('http://', 'https://', 'HTTP://', '', 'socks5://', 'http:/')
  await fc.assert(fc.asyncProperty(fc.tuple(scheme, userinfo, host, port, fc.constantFrom('', '/', '/p?q#f')), fc.constantFrom('HTTPS_PROXY', 'http_proxy'),
    async (parts, name) => {
      const env = { ...BASE, [name]: parts.join('') }
      const checked = checkConfig(env)
      const served = await serveVerdict(env)
      if (!checked.valid) t.ok(checked.problems.every((p) => p.startsWith(`${name}: `)), `named: ${checked.problems.join('; ')}`)
      return JSON.stringify(checked) === JSON.stringify(served)
    }), { numRuns: 60 })
})

t.test('hostile Redis URLs: the same verdict, never a crash', async (t) => {
  const scheme = fc.constantFrom('redis://', 'rediss://', 'REDIS://', 'http://', '')
  await fc.assert(fc.asyncProperty(fc.tuple(scheme, userinfo, fc.constantFrom('127.0.0.1', '[::1]', 'localhost', ''), port, fc.constantFrom('', '/0', '/x')),
    async (parts) => {
      const env = { ...BASE, RATE_LIMIT_REDIS_URL: parts.join('') }
      return JSON.stringify(checkConfig(env)) === JSON.stringify(await serveVerdict(env))
    }), { numRuns: 40 })
})

for (const [name, value] of [['HTTPS_PROXY', 'http://user:50%off@proxy:3128'], ['RATE_LIMIT_REDIS_URL', 'redis://user:50%off@127.0.0.1:6379']] as const) {
  t.test(`${name} with a bad % escape: check-config and serve both exit 1 naming it, no stack trace`, { skip: SKIP_UNDER_MUTATION }, async (t) => {
    const env = { ...BASE, [name]: value }
    for (const command of ['check-config', 'serve']) {
      const run = runMain(t, [command], env)
      t.equal(await run.exited, 1, `${command}: exit 1`)
      t.match(run.stderr(), new RegExp(`^store-auth-proxy: invalid configuration:\\n {2}- ${name}: has a % not followed by two hex digits`), `${command}: names ${name}`)
      t.notMatch(run.stderr(), /URIError|\n\s+at /, `${command}: no stack trace`)
      t.notMatch(run.stderr() + run.stdout(), /50%off/, `${command}: never the value`)
    }
  })
}
