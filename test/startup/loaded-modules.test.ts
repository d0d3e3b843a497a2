// `serve` loads only what its configuration runs: every module the process resolves (ES
// modules, require() and Node's builtins alike, test/helpers/loaded-modules.mjs) is listed
// from the moment it starts until it stops, and none of the optional parts may be among them
// when nothing configures it. Each part costs every pod its start-up and private memory
// (docs/performance.md).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { tempDir } from '../helpers/temp-dir.js'

const HOOK = fileURLToPath(new URL('../helpers/loaded-modules.mjs', import.meta.url))

/** What a plain `serve` must not load, each with the part it belongs to. */
const OPTIONAL_PARTS: ReadonlyArray<readonly [string, RegExp]> = [
  ['the demo (only its help is read)', /\/dist\/demo\/(?!command-table\.js$)/],
  ['another command: healthcheck', /\/dist\/cli\/healthcheck\.js$/],
  ['pretty logs (LOG_FORMAT=pretty, or a terminal)', /\/node_modules\/pino-pretty\//],
  ['the read cache (a rule with cache=)', /\/dist\/cache\/(read-cache|redis-cache|entries|flights)\.js$|\/node_modules\/lru-cache\//],
  ['Redis (RATE_LIMIT_REDIS_URL)', /\/dist\/redis\/|\/dist\/quota\/(redis-backend|redis-scripts|redis-script-holds|fleet-store|fleet-view|fleet-alone|fleet-conversation)\.js$|\/node_modules\/ioredis\//],
  ['tracing, and prom-client\'s default collectors before the first scrape', /\/dist\/tracing\/|\/node_modules\/@opentelemetry\//],
  ['Node\'s own copy of undici (src/cli/undici-globals.ts)', /^node:internal\/deps\/undici\//],
  ['prom-client\'s parts the sidecar does not use', /\/node_modules\/prom-client\/(index|lib\/(pushgateway|cluster|summary|defaultMetrics))\.js$/]
]

/** Starts `serve` with the hook, waits for the first token, stops it, and returns what it loaded. */
async function loadedBy (t: Test, env: Record<string, string>): Promise<string[]> {
  const standIn = await startStandIn(t)
  const out = join(tempDir('loaded-modules-'), 'loaded.txt')
  const running = runMain(t, ['serve'], {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', LOADED_MODULES_OUT: out, ...env
  }, [`--import=${HOOK}`])
  await running.waitFor(/access token acquired/)
  running.child.kill('SIGTERM')
  t.equal(await running.exited, 0, 'stopped cleanly')
  return readFileSync(out, 'utf8').split('\n').filter((line) => line !== '')
}

function partsIn (loaded: readonly string[]): string[] {
  return OPTIONAL_PARTS.flatMap(([part, pattern]) => loaded.filter((url) => pattern.test(url)).map((url) => `${part}: ${url}`))
}

t.test('the minimal configuration loads none of the optional parts', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const loaded = await loadedBy(t, {})
  // The list is whole: the sidecar's own modules, its packages and Node's builtins are in it.
  for (const needed of [/\/dist\/app\.js$/, /\/node_modules\/fastify\/fastify\.js$/, /\/node_modules\/undici\//, /^node:http$/, /\/node_modules\/prom-client\/lib\/registry\.js$/]) {
    t.ok(loaded.some((url) => needed.test(url)), `loaded: ${String(needed)}`)
  }
  t.same(partsIn(loaded), [], 'nothing the configuration does not run')
})

t.test('a part is loaded once configured: a rule with cache= loads the read cache', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const parts = partsIn(await loadedBy(t, { RATE_LIMITS: 'GET /v2/store/products/** 5/1s cache=60s' }))
  t.ok(parts.some((p) => p.includes('/node_modules/lru-cache/')), 'lru-cache')
  t.ok(parts.some((p) => p.endsWith('/dist/cache/read-cache.js')), 'the read cache')
  t.notOk(parts.some((p) => p.startsWith('Redis')), 'still no Redis')
})
