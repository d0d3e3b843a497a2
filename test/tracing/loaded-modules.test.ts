// With tracing off the sidecar loads none of OpenTelemetry (the SDK, the API, the exporter,
// src/tracing/); with an endpoint set it does. Every module the process resolves is listed by
// test/helpers/loaded-modules.mjs.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { tempDir } from '../helpers/temp-dir.js'
import { startReceiver } from './receiver.js'

t.setTimeout(120_000)
const HOOK = fileURLToPath(new URL('../helpers/loaded-modules.mjs', import.meta.url))
const TRACING = /\/node_modules\/@opentelemetry\/|\/dist\/tracing\//

async function loadedBy (t: Test, env: Record<string, string>): Promise<string[]> {
  const standIn = await startStandIn(t)
  const out = join(tempDir('tracing-modules-'), 'loaded.txt')
  const running = runMain(t, ['serve'], {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', LOADED_MODULES_OUT: out, ...env
  }, [`--import=${HOOK}`])
  await running.waitFor(/access token acquired/, 30_000)
  running.child.kill('SIGTERM')
  t.equal(await running.exited, 0, 'stopped cleanly')
  return readFileSync(out, 'utf8').split('\n').filter((line) => line !== '')
}

t.test('tracing off (rules, Redis-free): no @opentelemetry module, nothing of src/tracing', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const loaded = await loadedBy(t, { RATE_LIMITS: 'GET /v2/store/** 5/1s', OTEL_SERVICE_NAME: 'set but no endpoint' })
  t.ok(loaded.some((url) => url.endsWith('/dist/app.js')), 'the list is whole')
  t.same(loaded.filter((url) => TRACING.test(url)), [])
})

t.test('an endpoint set: the SDK and src/tracing are loaded', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const receiver = await startReceiver(t)
  const loaded = await loadedBy(t, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url })
  t.ok(loaded.some((url) => url.endsWith('/dist/tracing/index.js')))
  t.ok(loaded.some((url) => url.includes('/node_modules/@opentelemetry/sdk-trace/')))
})
