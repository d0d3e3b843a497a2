// `serve` and the operator-error exits, in-process: main.ts now imports them only for the
// command that runs them, so the process tests (test/cli/*.test.ts, through dist/) no longer
// exercise src/. What a person sees of them is checked there; here, that they do it.
import t from 'tap'
import { configOrExit, listenOrExit, loadLogger } from '../../src/cli/exit.js'
import { loadSidecarConfig, serve } from '../../src/cli/serve.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { captureLogs } from '../helpers/logs.js'

/** process.exit and stderr replaced for one call: what it wrote, and the exit code. */
async function exits (fn: () => unknown): Promise<{ code: unknown, stderr: string, thrown: unknown }> {
  let stderr = ''
  let code: unknown
  let thrown: unknown
  const { exit } = process
  const write = process.stderr.write
  process.stderr.write = ((chunk: string) => { stderr += chunk; return true }) as typeof write
  process.exit = ((c: unknown) => { code = c; throw new Error('exited') }) as typeof exit
  try {
    await fn()
  } catch (err) {
    thrown = err
  } finally {
    process.exit = exit
    process.stderr.write = write
  }
  return { code, stderr, thrown }
}

t.test('configOrExit: the value, a ConfigError as one line and exit 1, anything else thrown on', async (t) => {
  t.equal(configOrExit(() => 42), 42)
  const { code, stderr } = await exits(() => configOrExit(() => { throw new ConfigError(['PORT must be a number']) }))
  t.equal(code, 1)
  t.equal(stderr, 'store-auth-proxy: invalid configuration:\n  - PORT must be a number\n')
  t.throws(() => configOrExit(() => { throw new TypeError('a bug') }), TypeError)
})

t.test('listenOrExit: listens, or one line naming the variables and exit 1', async (t) => {
  const calls: unknown[] = []
  await listenOrExit({ listen: async (options) => { calls.push(options) } }, { host: 'HOST', port: 'PORT' }, '127.0.0.1', 8080, 511)
  t.same(calls, [{ host: '127.0.0.1', port: 8080, backlog: 511 }])
  const inUse = Object.assign(new Error('listen EADDRINUSE'), { code: 'EADDRINUSE' })
  const { code, stderr } = await exits(async () => { await listenOrExit({ listen: async () => { throw inUse } }, { host: 'HOST', port: 'PORT' }, '127.0.0.1', 8080) })
  t.equal(code, 1)
  t.match(stderr, /^store-auth-proxy: PORT=8080 \(HOST=127\.0\.0\.1\): .*EADDRINUSE/)
})

t.test('loadLogger: JSON lines when stdout is not a terminal', async (t) => {
  const log = await loadLogger('silent', 'json')
  t.equal(log.level, 'silent')
})

t.test('serve: the configuration loaded, both listeners up, the start line logged', async (t) => {
  const standIn = await startStandIn(t)
  const config = await loadSidecarConfig({
    CLIENT_ID, CLIENT_SECRET, AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1'
  })
  const logs = captureLogs()
  const app = await serve(config, logs.log)
  t.teardown(() => app.close())
  t.ok(app.proxy.server.listening && app.admin.server.listening, 'both listeners up')
  const started = logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'store-auth-proxy started')
  t.match(started, { proxy: '127.0.0.1:0', clientIdFrom: 'environment', clientSecretFrom: 'environment' })
  t.notOk(logs.lines.some((l) => l.includes(CLIENT_SECRET)), 'never the secret')
  const { code } = await exits(async () => await loadSidecarConfig({ CLIENT_ID }))
  t.equal(code, 1, 'a configuration error exits 1')
})
