// A Redis URL carrying a password (given directly, or in a file through
// RATE_LIMIT_REDIS_URL_FILE) never appears in any log line, /status, /readyz or /metrics,
// whether Redis is up, down, or refusing a wrong password; wherever the URL is shown it
// is scheme://host:port.
import { join } from 'node:path'
import t from 'tap'
import { callVia, eventually, getText, header, ownError, secretsOf, startArrivalUpstream, startSidecar, statusOf, type Sidecar } from './fleet.js'
import { startRedisWithPassword } from './redis-auth.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'

const PASSWORD = 's3cret-pass'
const WRONG = 'wr0ng-pass'
const RULE = '* /v2/store/**'

t.setTimeout(120_000)

/** Everything a sidecar shows of itself: its output, /status, /readyz and /metrics. */
async function everything (s: Sidecar): Promise<string> {
  const pages = await Promise.all(['/status', '/readyz', '/metrics', '/livez'].map(async (p) => (await getText(s.adminUrl + p)).body))
  return [s.output(), ...pages].join('\n')
}

t.test('the Redis password never shows: in logs, /status, /readyz or /metrics, up or down', async (t) => {
  const redis = await startRedisWithPassword(t, PASSWORD)
  const tokenEndpoint = await startRecordingTokenEndpoint(t)
  const upstream = await startArrivalUpstream(t)
  const dir = t.testdir({ 'redis-url': `${redis.url}\n` })
  const base = { AUTH_URL: tokenEndpoint.url, UPSTREAM_URL: upstream.url, RATE_LIMITS: `${RULE} 5/1m`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '1000', LOG_LEVEL: 'debug' }
  const direct = await startSidecar(t, 'A', { ...base, RATE_LIMIT_REDIS_URL: redis.url })
  const fromFile = await startSidecar(t, 'B', { ...base, RATE_LIMIT_REDIS_URL_FILE: join(dir, 'redis-url') })
  const wrong = await startSidecar(t, 'C', { ...base, RATE_LIMIT_REDIS_URL: `redis://default:${WRONG}@127.0.0.1:${redis.port}` })
  const shown = `redis://127.0.0.1:${redis.port}`
  const secrets = [PASSWORD, WRONG, encodeURIComponent(PASSWORD), 's3cret', 'wr0ng', ...secretsOf(tokenEndpoint.issued)]
  const leaks = (text: string): string[] => secrets.filter((secret) => text.includes(secret))

  // Up: the password works (both on redis, sharing one budget), the wrong one does not.
  for (const s of [direct, fromFile]) {
    const status = await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'redis')
    t.match(status?.redis, { url: shown, up: true, problem: null }, `sidecar ${s.name}: /status shows ${shown}, up`)
  }
  const wrongStatus = await eventually('sidecar C (wrong password) on memory', async () => (await statusOf(wrong)).rateLimits, (r) => r?.backend === 'memory')
  t.match(wrongStatus?.redis, { url: shown, up: false, problem: 'redis refused our credentials (WRONGPASS): check the user and password in the Redis URL' },
    'sidecar C: a wrong password is named as such (a configuration problem, not the network), shown without the password')
  const calls = []
  for (let i = 0; i < 8; i++) calls.push(await callVia(i % 2 === 0 ? direct : fromFile, '/v2/store/orders'))
  t.same(calls.map((c) => c.status), [200, 200, 200, 200, 200, 429, 429, 429], 'A and B share one budget of 5/1m: the password reached Redis')
  const wrongCall = await callVia(wrong, '/v2/store/orders')
  t.equal(wrongCall.status, 429, 'sidecar C never reached Redis and has no RATE_LIMIT_FLEET_SIZE: it cannot know its share, so it refuses')
  t.equal(header(wrongCall, 'retry-after'), '1', 'and says to ask again soon (Redis may answer by then)')
  t.match(ownError(wrongCall)?.message, /cannot be checked/)
  for (const s of [direct, fromFile, wrong]) t.same(leaks(await everything(s)), [], `sidecar ${s.name}, Redis up: no password anywhere`)

  // Down.
  await redis.stop()
  for (const s of [direct, fromFile]) {
    await eventually(`sidecar ${s.name} falls back`, async () => (await statusOf(s)).rateLimits?.backend, (b) => b === 'memory')
    const served = await callVia(s, '/v2/store/orders')
    t.ok(served.status === 200 || served.status === 429, `sidecar ${s.name}: a caller served with Redis down (${String(served.status)})`)
    const ready = await getText(s.adminUrl + '/readyz')
    t.equal(ready.status, 200, `sidecar ${s.name}: ready with Redis down`)
    t.notMatch(ready.body, /redis:\/\/[^/\s"]*@/, `sidecar ${s.name}: /readyz shows no userinfo`)
  }
  for (const s of [direct, fromFile, wrong]) {
    const text = await everything(s)
    t.same(leaks(text), [], `sidecar ${s.name}, Redis down: no password anywhere`)
    t.notMatch(text, /rediss?:\/\/[^/\s"]*@/, `sidecar ${s.name}: no Redis URL with userinfo anywhere`)
  }
})
