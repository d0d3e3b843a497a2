// Every outbound request goes through a dispatcher the sidecar chose: the route /status shows
// is the route taken. Node 24's NODE_USE_ENV_PROXY=1 (a platform may set it for every Node
// process) makes undici's global dispatcher an EnvHttpProxyAgent, and any module may call
// setGlobalDispatcher(): neither may carry the token request or a store call (every listener bounded, case 3).
import t from 'tap'
import { getGlobalDispatcher, ProxyAgent, request, setGlobalDispatcher } from 'undici'
import { CLIENT_ID, CLIENT_SECRET, startSidecar, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { startRecordingProxy } from '../helpers/recording-proxy.js'
import { startUpstream } from '../helpers/upstream.js'

t.test('a global dispatcher set by someone else carries nothing: token and store calls go direct', async (t) => {
  const upstream = await startUpstream(t)
  const recorder = await startRecordingProxy(t, { hosts: {} })
  const before = getGlobalDispatcher()
  const hijack = new ProxyAgent(recorder.url)
  setGlobalDispatcher(hijack)
  t.teardown(async () => {
    setGlobalDispatcher(before)
    await hijack.close()
  })
  const { proxyUrl, adminUrl, app } = await startSidecar(t, upstream.url)
  t.ok(app.tokens.state().hasValidToken, 'the token was fetched')
  const res = await request(`${proxyUrl}/v2/store/items`, { dispatcher: before })
  t.equal(res.statusCode, 200, 'the store call was answered')
  await res.body.dump()
  t.equal(upstream.received.length, 1, 'it reached the upstream')
  const status = await request(`${adminUrl}/status`, { dispatcher: before })
  t.match(await status.body.json(), { config: { tokenRoute: 'direct (no proxy set)' } }, '/status says direct')
  t.same(recorder.seen, [], 'nothing went through the global dispatcher')
})

t.test('NODE_USE_ENV_PROXY=1 with HTTP_PROXY set: the sidecar still goes the way it says (direct, loopback)', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const standIn = await startStandIn(t)
  const upstream = await startUpstream(t)
  const recorder = await startRecordingProxy(t, { hosts: {} })
  const running = runMain(t, ['serve'], {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: upstream.url,
    CLIENT_ID,
    CLIENT_SECRET,
    PORT: '0',
    ADMIN_PORT: '0',
    ADMIN_HOST: '127.0.0.1',
    NODE_USE_ENV_PROXY: '1',
    HTTP_PROXY: recorder.url,
    HTTPS_PROXY: recorder.url
  })
  // A process start on two cores shared by many: the start line, not a fixed time, is awaited.
  const startMs = 30_000
  const admin = (await running.waitFor(/"listener":"admin","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/, startMs))[1] ?? ''
  const proxy = (await running.waitFor(/"listener":"proxy","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/))[1] ?? ''
  const line = await running.waitFor(/"tokenRoute":"([^"]+)"/, startMs)
  t.equal(line[1], 'direct (loopback)', 'the start log says direct')
  const ready = await eventually(t, 'ready: its first token', async () => {
    try {
      return (await fetch(`${admin}/readyz`)).status === 200
    } catch {
      return false
    }
  }, startMs)
  t.ok(ready, 'ready')
  const res = await fetch(`${proxy}/v2/store/items`)
  t.equal(res.status, 200, 'a store call answered')
  t.same(recorder.seen, [], 'neither the token request nor the store call went through the proxy Node\'s switch names')
  running.child.kill('SIGTERM')
  await running.exited
})
