// The command line an operator meets: help, version, the start-up line, the build_info
// metric, and listener failures as one clear line.
import { readFileSync } from 'node:fs'
import { createServer, type AddressInfo, type Server } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { buildInfo, parseRevision } from '../../src/config/build-info.js'
import { CLIENT_ID, CLIENT_SECRET } from '../helpers/build.js'
import { runMain } from '../helpers/process.js'

// About 25 process starts: on 2 shared cores they can take longer than .taprc's 60 s.
t.setTimeout(180_000)

const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
const NO_TOKEN_ENV = { CLIENT_ID, CLIENT_SECRET, AUTH_URL: 'http://127.0.0.1:1', UPSTREAM_URL: 'http://127.0.0.1:1' }

/** A port this test holds, so the sidecar finds it taken. */
async function holdPort (t: Test): Promise<number> {
  const server: Server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.close() })
  return (server.address() as AddressInfo).port
}

t.test('healthcheck of a sidecar without a token prints the /readyz reason', async (t) => {
  // Nothing listens at AUTH_URL: the sidecar never gets its first token.
  const { running, adminUrl } = await startedWithoutToken(t)
  const check = runMain(t, ['healthcheck'], { ADMIN_HOST: '127.0.0.1', ADMIN_PORT: new URL(adminUrl).port })
  t.equal(await check.exited, 1)
  t.equal(check.stderr(), `not healthy: ${adminUrl}/readyz answered 503: waiting for the first access token\n`)
  running.child.kill('SIGTERM')
  await running.exited
})

async function startedWithoutToken (t: Test) {
  const running = runMain(t, [], {
    PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', ...NO_TOKEN_ENV
  })
  const admin = await running.waitFor(/"listener":"admin","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/)
  await running.waitFor(/store-auth-proxy started/)
  return { running, adminUrl: admin[1] ?? '' }
}

// Every command answers --help, -h and `help` with its usage, exit 0.
const COMMANDS = ['serve', 'check-config', 'healthcheck', 'demo', 'stand-in', 'caller', 'help', 'version']

t.test('--help, -h and help print the usage (every command, the configuration table) and exit 0', async (t) => {
  const runs = [['--help'], ['-h'], ['help']].map((args) => ({ args, run: runMain(t, args, {}) }))
  for (const { args, run } of runs) {
    t.equal(await run.exited, 0, args.join(' '))
    const out = run.stdout()
    t.match(out, /^store-auth-proxy \S+ \(revision \S+, node v\d+/, `${args.join(' ')}: version first`)
    for (const command of COMMANDS) t.match(out, new RegExp(`^ {2}${command}\\b`, 'm'), `${args.join(' ')} lists ${command}`)
    t.match(out, /"help config" lists each with its default/)
    t.equal(run.stderr(), '')
  }
})

t.test('<command> --help prints that command\'s usage, runs nothing and exits 0', async (t) => {
  // Each command with --help, one with -h; all at once (each is a process start).
  const runs = COMMANDS.map((c, i) => [c, i % 2 === 0 ? '--help' : '-h']).map(([command = '', flag = '']) =>
    ({ command, flag, run: runMain(t, [command, flag], { STAND_IN_PORT: '0', PORT: '0', ADMIN_PORT: '0' }) }))
  for (const { command, flag, run } of runs) {
    t.equal(await run.exited, 0, `${command} ${flag}`)
    if (command === 'help') continue
    t.match(run.stdout(), new RegExp(`^Usage: node dist/main\\.js ${command}\\b`), `${command} ${flag}: its usage`)
    t.notMatch(run.stdout(), /Server listening|store-auth-proxy started/, `${command} ${flag} starts nothing`)
  }
  const topic = runMain(t, ['help', 'stand-in'], {})
  t.equal(await topic.exited, 0)
  t.match(topic.stdout(), /^Usage: node dist\/main\.js stand-in\n/)
})

t.test('stand-in --help does not start a server (it used to ignore the flag)', async (t) => {
  const port = await holdPort(t)
  // Were it to start, it would fail on the held port with exit 1.
  const run = runMain(t, ['stand-in', '--help'], { STAND_IN_PORT: String(port) })
  t.equal(await run.exited, 0)
  t.match(run.stdout(), /STAND_IN_PORT/)
})

t.test('unknown commands, options and extra arguments: exit 2 with a pointer to --help', async (t) => {
  for (const [args, message] of [
    [['nope'], 'unknown command "nope"'],
    [['--bogus'], 'unknown option "--bogus"'],
    [['check-config', 'extra'], 'check-config: unexpected argument "extra"'],
  ] as const) {
    const run = runMain(t, [...args], {})
    t.equal(await run.exited, 2, args.join(' '))
    t.equal(run.stderr(), `store-auth-proxy: ${message}\nRun "node dist/main.js --help" for the commands.\n`)
  }
})

t.test('--version, -v and version print package.json\'s version, the revision and node', async (t) => {
  const runs = [['--version'], ['-v'], ['version'], ['check-config', '--version']].map((args) => ({ args, run: runMain(t, args, {}) }))
  for (const { args, run } of runs) {
    t.equal(await run.exited, 0, args.join(' '))
    t.equal(run.stdout(), `store-auth-proxy ${PACKAGE_VERSION} (revision ${buildInfo().revision}, node ${process.version})\n`, args.join(' '))
  }
  t.equal(buildInfo().version, PACKAGE_VERSION, 'version.ts reads package.json')
})

t.test('the revision: one short line of safe characters from dist/REVISION, else unknown', async (t) => {
  t.equal(parseRevision('0123abcd\n'), '0123abcd')
  t.equal(parseRevision('v1.2.3-rc.1+build.5'), 'v1.2.3-rc.1+build.5')
  t.equal(parseRevision(undefined), 'unknown')
  t.equal(parseRevision(''), 'unknown')
  t.equal(parseRevision('a b'), 'unknown')
  t.equal(parseRevision('x'.repeat(65)), 'unknown')
  t.equal(parseRevision('abc"} 1\nstore_auth_proxy_fake 1'), 'unknown', 'nothing that could break a label or a log line')
})

t.test('the start-up log line and /metrics carry the version and revision', async (t) => {
  const { running, adminUrl } = await startedWithoutToken(t)
  const line = running.stdout().split('\n').find((l) => l.includes('store-auth-proxy started')) ?? ''
  const { version, revision, node } = buildInfo()
  t.match(JSON.parse(line), { version: PACKAGE_VERSION, revision, node: process.version, proxy: /^127\.0\.0\.1:\d+$/ })
  const text = await (await request(adminUrl + '/metrics')).body.text()
  t.match(text, `\nstore_auth_proxy_build_info{version="${version}",revision="${revision}",node="${node}"} 1\n`)
  // The runtime metrics keep prom-client's standard names, without the prefix.
  t.match(text, /^process_cpu_user_seconds_total /m)
  t.match(text, /^nodejs_heap_size_used_bytes /m)
  t.notMatch(text, /^store_auth_proxy_(process|nodejs)_/m, 'no prefixed runtime metric')
  t.match(text, /^store_auth_proxy_token_requests_total/m, 'the sidecar\'s own keep the prefix')
  running.child.kill('SIGTERM')
  await running.exited
})

// A port that is taken is one clear line and exit 1, not a stack trace.
t.test('PORT taken: one line naming PORT, HOST and the address, exit 1, no stack', async (t) => {
  const port = await holdPort(t)
  const run = runMain(t, [], {
    PORT: String(port), ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', ...NO_TOKEN_ENV
  })
  t.equal(await run.exited, 1)
  t.equal(run.stderr(), `store-auth-proxy: PORT=${port} (HOST=127.0.0.1): cannot listen on 127.0.0.1:${port}: ` +
    'the address is already in use (another process, or the other listener, holds it) (EADDRINUSE)\n')
})

t.test('ADMIN_PORT taken: the line names ADMIN_PORT', async (t) => {
  const port = await holdPort(t)
  const run = runMain(t, [], {
    PORT: '0', ADMIN_PORT: String(port), ADMIN_HOST: '127.0.0.1', ...NO_TOKEN_ENV
  })
  t.equal(await run.exited, 1)
  t.match(run.stderr(), new RegExp(`^store-auth-proxy: ADMIN_PORT=${port} \\(ADMIN_HOST=127\\.0\\.0\\.1\\): cannot listen on 127\\.0\\.0\\.1:${port}: .*\\(EADDRINUSE\\)\\n$`))
  t.notMatch(run.stderr(), /\n\s+at /, 'no stack trace')
})

t.test('a HOST that is not this machine\'s: one line naming HOST, exit 1', async (t) => {
  // 203.0.113.0/24 is TEST-NET-3: never a local address; binding sends nothing.
  const run = runMain(t, [], {
    HOST: '203.0.113.77', PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', ...NO_TOKEN_ENV
  })
  t.equal(await run.exited, 1)
  t.equal(run.stderr(), 'store-auth-proxy: HOST=203.0.113.77: cannot listen on 203.0.113.77:0: the address is not one of this machine\'s (EADDRNOTAVAIL)\n')
})

t.test('STAND_IN_PORT taken: the stand-in says so in one line', async (t) => {
  const port = await holdPort(t)
  const run = runMain(t, ['stand-in'], { STAND_IN_PORT: String(port) })
  t.equal(await run.exited, 1)
  t.match(run.stderr(), new RegExp(`^store-auth-proxy: STAND_IN_PORT=${port} \\(STAND_IN_HOST=127\\.0\\.0\\.1\\): cannot listen .*\\(EADDRINUSE\\)\\n$`))
})

t.test('check-config refuses PORT == ADMIN_PORT on overlapping hosts without listening', async (t) => {
  const port = await holdPort(t)
  const run = runMain(t, ['check-config'], {
    PORT: String(port), ADMIN_PORT: String(port), CLIENT_ID, CLIENT_SECRET, AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test'
  })
  t.equal(await run.exited, 1)
  t.match(run.stderr(), new RegExp(`^ {2}- PORT: equals ADMIN_PORT \\(${port}\\) on overlapping addresses \\(HOST=127\\.0\\.0\\.1, ADMIN_HOST=0\\.0\\.0\\.0\\)`, 'm'))
})
