import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { runMain } from '../helpers/process.js'
import { startUpstream } from '../helpers/upstream.js'

/** A preload that prints, at exit, the npm packages the process loaded. */
const LOADED_PACKAGES = fileURLToPath(new URL('../fixtures/loaded-packages.cjs', import.meta.url))

async function started (t: Test, env: Record<string, string>) {
  const running = runMain(t, [], { PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, ...env })
  const admin = await running.waitFor(/"listener":"admin","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/)
  const proxy = await running.waitFor(/"listener":"proxy","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/)
  await running.waitFor(/access token acquired/)
  return { running, adminUrl: admin[1] ?? '', proxyUrl: proxy[1] ?? '' }
}

t.test('bad configuration: exit 1 at once, one message naming every bad variable, no stack, no secret', async (t) => {
  const running = runMain(t, [], { AUTH_URL: 'not a url', PORT: 'eighty', CLIENT_ID: 'x', CLIENT_SECRET: 'Sup3r&Secret' })
  t.equal(await running.exited, 1)
  const stderr = running.stderr()
  t.match(stderr, /^store-auth-proxy: invalid configuration:\n/)
  for (const name of ['PORT', 'AUTH_URL', 'UPSTREAM_URL', 'CLIENT_SECRET']) t.match(stderr, new RegExp(`^ {2}- ${name}: `, 'm'), name)
  t.notMatch(stderr, 'Sup3r')
  t.notMatch(stderr, /\n\s+at /, 'no stack trace')
  t.equal(running.stdout(), '')
})

t.test('check-config validates and exits 0 without printing credentials', async (t) => {
  const running = runMain(t, ['check-config'], { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID, CLIENT_SECRET })
  t.equal(await running.exited, 0)
  t.match(running.stdout(), /^configuration is valid: /)
  t.notMatch(running.stdout(), CLIENT_SECRET)
})

t.test('SIGTERM with 200 requests in flight: not ready at once, new connections refused, all 200 complete, exit 0', async (t) => {
  const standIn = await startStandIn(t)
  let release: () => void = () => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  const upstream = await startUpstream(t, (_req, res) => { void held.then(() => res.end('finished')) })
  const { running, adminUrl, proxyUrl } = await started(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, SHUTDOWN_GRACE_MS: '10000' })

  const inflight = Promise.all(Array.from({ length: 200 }, async () => {
    const res = await request(proxyUrl + '/slow')
    return { status: res.statusCode, body: await res.body.text() }
  }))
  const inFlight = async () => {
    const text = await (await request(adminUrl + '/metrics')).body.text()
    return Number(/^store_auth_proxy_requests_in_flight (\d+)/m.exec(text)?.[1])
  }
  await eventually(t, '200 requests in flight', async () => await inFlight() >= 200)

  running.child.kill('SIGTERM')
  await running.waitFor(/shutting down/)
  // The admin listener stays up while requests drain, and says not ready.
  const ready = await request(adminUrl + '/readyz')
  t.equal(ready.statusCode, 503)
  await ready.body.dump()
  const refused = await request(proxyUrl + '/new').then((r) => r.statusCode, (e: { code: string }) => e.code)
  t.equal(refused, 'ECONNREFUSED', 'new connections are refused')

  release()
  const results = await inflight
  t.equal(results.length, 200)
  t.same(new Set(results.map((r) => `${r.status} ${r.body}`)), new Set(['200 finished']), 'every in-flight request completed')
  t.equal(await running.exited, 0)
})

t.test('SIGINT on an idle sidecar exits 0 promptly', async (t) => {
  const standIn = await startStandIn(t)
  const { running } = await started(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  const sent = Date.now()
  running.child.kill('SIGINT')
  t.equal(await running.exited, 0)
  t.ok(Date.now() - sent < 3000)
})

t.test('healthcheck: exit 0 when the URL answers 200, 1 otherwise, and one line saying what failed', async (t) => {
  const standIn = await startStandIn(t)
  const up = runMain(t, ['healthcheck', `${standIn.url}/healthz`], {})
  t.equal(await up.exited, 0)
  t.equal(up.stdout(), `healthy: ${standIn.url}/healthz answered 200\n`)
  const down = runMain(t, ['healthcheck', `${standIn.url}/v2/store/products`], {})
  t.equal(await down.exited, 1, '401 is not healthy')
  t.equal(down.stderr(), `not healthy: ${standIn.url}/v2/store/products answered 401\n`)
  const closed = runMain(t, ['healthcheck'], { ADMIN_PORT: '1' })
  t.equal(await closed.exited, 1)
  t.equal(closed.stderr(), 'not healthy: http://127.0.0.1:1/readyz refused the connection (nothing listens there) (ECONNREFUSED)\n')
})

t.test('healthcheck loads none of the sidecar\'s stack (container runtimes run it every few seconds)', async (t) => {
  const standIn = await startStandIn(t)
  const check = runMain(t, ['healthcheck', `${standIn.url}/healthz`], {}, ['--require', LOADED_PACKAGES])
  t.equal(await check.exited, 0)
  const report = /^loaded packages: (.*)$/m.exec(check.stderr())
  t.ok(report, 'the preload reported')
  const loaded = report?.[1]?.split(',') ?? []
  for (const heavy of ['fastify', 'undici', 'pino', 'ajv', 'prom-client']) t.notOk(loaded.includes(heavy), `${heavy} not loaded`)

  const config = runMain(t, ['check-config'], { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET }, ['--require', LOADED_PACKAGES])
  t.equal(await config.exited, 0)
  t.match(config.stderr(), /^loaded packages: .*ajv/m, 'the report sees what a command loads')
})
