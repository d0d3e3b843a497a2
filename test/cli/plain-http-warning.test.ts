// The warning for a plain http:// URL off this machine, where an operator sees it: on stderr
// from check-config (which still says the configuration is valid, exit 0), in the log at start.
import t from 'tap'
import { CLIENT_ID, CLIENT_SECRET } from '../helpers/build.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'

const WARNING = 'AUTH_URL is plain http:// to auth.example.test, which is not this machine: the client secret would cross the network unencrypted; use https://'

t.test('check-config: valid, exit 0, and the warning on stderr', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const run = runMain(t, ['check-config'], { AUTH_URL: 'http://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID, CLIENT_SECRET })
  t.equal(await run.exited, 0)
  t.match(run.stdout(), /^configuration is valid: /)
  t.equal(run.stderr(), `store-auth-proxy: warning: ${WARNING}\n`)
  const tls = runMain(t, ['check-config'], { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'http://127.0.0.1:8081', CLIENT_ID, CLIENT_SECRET })
  t.equal(await tls.exited, 0)
  t.equal(tls.stderr(), '', 'https, and plain http on this machine: no warning')
})

t.test('serve: a warning line in the log after the start-up line', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  // The token requests go to an egress proxy on loopback that refuses them: nothing leaves the machine.
  const run = runMain(t, [], {
    AUTH_URL: 'http://auth.example.test', UPSTREAM_URL: 'https://api.example.test', HTTP_PROXY: 'http://127.0.0.1:1', CLIENT_ID, CLIENT_SECRET, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1'
  })
  const line = await run.waitFor(/^\{"level":40,[^\n]*"msg":"(AUTH_URL is plain http:\/\/ to auth\.example\.test,[^"]*)"\}$/m)
  t.match(line[1], /the client secret would cross the network unencrypted; use https:\/\/$/)
  run.child.kill('SIGTERM')
  t.equal(await run.exited, 0)
})
