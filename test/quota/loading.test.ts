// With no rules and no Redis, ioredis is not loaded at all; it is with a Redis URL.
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain } from '../helpers/process.js'

const LOADED_PACKAGES = fileURLToPath(new URL('../fixtures/loaded-packages.cjs', import.meta.url))

async function loadedBy (t: Test, env: Record<string, string>): Promise<string[]> {
  const standIn = await startStandIn(t)
  const running = runMain(t, [], {
    PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, ...env
  }, ['--require', LOADED_PACKAGES])
  await running.waitFor(/store-auth-proxy started/)
  running.child.kill('SIGTERM')
  await running.exited
  const report = /^loaded packages: (.*)$/m.exec(running.stderr())
  t.ok(report, 'the preload reported')
  return report?.[1]?.split(',') ?? []
}

t.test('no rules, no Redis: neither ioredis nor rate-limiter-flexible is loaded', async (t) => {
  const loaded = await loadedBy(t, {})
  t.ok(loaded.includes('fastify'), 'the report sees the sidecar\'s stack')
  t.notOk(loaded.includes('ioredis'))
  t.notOk(loaded.includes('rate-limiter-flexible'))
})

t.test('rules alone do not load ioredis either; a Redis URL does', async (t) => {
  t.notOk((await loadedBy(t, { RATE_LIMITS: '* /v2/store/** 5/1s' })).includes('ioredis'))
  // Nothing listens there: the sidecar starts anyway, limits in memory.
  t.ok((await loadedBy(t, { RATE_LIMIT_REDIS_URL: 'redis://127.0.0.1:1' })).includes('ioredis'))
})
