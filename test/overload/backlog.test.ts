// The proxy listener's accept queue holds MAX_CONNECTIONS pending connections, so that a
// burst arriving while the event loop is busy waits there and is answered instead of
// overflowing Node's default 511 (bench/probe/backlog.ts measures what overflowing costs); the
// admin listener's holds ADMIN_BACKLOG, so that a flood there does not drop a probe's SYN.
// The backlog a socket listens with is what `ss -lt` shows as Send-Q.
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { ADMIN_BACKLOG, DEFAULT_BACKLOG, proxyBacklog } from '../../src/overload/manager.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { SS, skipUnless } from '../helpers/tools.js'

t.test('the backlog follows MAX_CONNECTIONS, never below Node\'s default', async (t) => {
  t.equal(DEFAULT_BACKLOG, 511)
  t.equal(proxyBacklog(2000), 2000)
  t.equal(proxyBacklog(512), 512)
  t.equal(proxyBacklog(100), 511, 'a low bound keeps the default queue')
  t.equal(proxyBacklog(0), 511, 'no bound: the default')
})

/** The backlogs of the sockets `pid` listens on, from `ss -ltnp` (undefined without ss). */
function listenBacklogs (pid: number): number[] | undefined {
  const ss = spawnSync('ss', ['-Hltnp'], { encoding: 'utf8' })
  if (ss.error !== undefined) return undefined
  return ss.stdout.split('\n')
    .filter((line) => line.includes(`pid=${pid},`))
    .map((line) => Number(line.trim().split(/\s+/)[2]))
    .sort((a, b) => a - b)
}

const noSs = skipUnless(SS)

t.test('the sidecar listens with it: the proxy port with MAX_CONNECTIONS, the admin port with ADMIN_BACKLOG', { skip: SKIP_UNDER_MUTATION || noSs }, async (t) => {
  const standIn = await startStandIn(t)
  const running = runMain(t, [], {
    PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, MAX_CONNECTIONS: '1500'
  })
  await running.waitFor(/store-auth-proxy started/)
  // The kernel caps a backlog at net.core.somaxconn.
  const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'))
  t.same(listenBacklogs(running.child.pid ?? -1), [1500, Math.min(ADMIN_BACKLOG, somaxconn)].sort((a, b) => a - b))
  running.child.kill('SIGTERM')
  await running.exited
})
