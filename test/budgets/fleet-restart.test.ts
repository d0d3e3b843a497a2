// Where the features meet, case 3: a sidecar cut off from Redis spends its share alone; restarted before it
// told Redis, its sends were lost and the share was spent twice: 4 sends within 600 ms under
// 3/6s (fleet of 3). With STATE_DIR the restarted sidecar reads its ledger and tells Redis
// those sends, under the same member id, before it shares again.
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import t from 'tap'
import { redisKeyPrefix } from '../../src/quota/redis-backend.js'
import { CLIENT_ID, startStandIn } from '../helpers/build.js'
import { startRedis } from '../helpers/redis.js'
import { startFaultProxy } from '../helpers/tcp-fault-proxy.js'
import { tempDir } from '../helpers/temp-dir.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'
import { eventually, quotaSidecar, type QuotaSidecar } from '../quota/sidecar.js'

const WINDOW_MS = 6_000
const RULE = 'GET /v2/store/**'
const ENV = { RATE_LIMITS: `${RULE} 3/6s`, RATE_LIMIT_FLEET_SIZE: '3', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_TIMEOUT_MS: '1000' }
const TIMING = { heartbeatMs: 200, presenceTtlMs: 600, freshGraceMs: 0 }

/** The most arrivals in any interval of the window's length (100 ms shorter: the network). */
function most (arrivals: number[]): number {
  const sorted = [...arrivals].sort((a, b) => a - b)
  let max = 0
  for (let i = 0; i < sorted.length; i++) {
    const start = sorted[i] ?? 0
    max = Math.max(max, sorted.filter((at) => at >= start && at < start + WINDOW_MS - 100).length)
  }
  return max
}

t.test('the 4-sends-in-600ms-under-3/6s reproduction: fleet of 3, a sidecar cut off, spending alone, restarted', async (t) => {
  const redis = await startRedis(t)
  const proxy = await startFaultProxy(t, redis.port)
  const { url: authUrl } = await startStandIn(t)
  // TI, timing each arrival.
  const arrivals: number[] = []
  const ti = createServer((_req, res) => { arrivals.push(performance.now()); res.end('{}') })
  await new Promise<void>((resolve) => ti.listen(0, '127.0.0.1', resolve))
  t.teardown(() => ti.close())
  const tiUrl = `http://127.0.0.1:${(ti.address() as { port: number }).port}`
  const recording = await startRecordingUpstream(t)
  const dir = tempDir('sap-state-')
  const options = { authUrl, upstream: recording, systemClock: true, quotaTiming: TIMING }
  const env = { ...ENV, UPSTREAM_URL: tiUrl }
  const a = await quotaSidecar(t, { ...env, STATE_DIR: dir }, { ...options, redisUrl: `redis://127.0.0.1:${proxy.port}` })
  const b = await quotaSidecar(t, env, { ...options, redisUrl: redis.url })
  const c = await quotaSidecar(t, env, { ...options, redisUrl: redis.url })
  await eventually(t, 'three present', async () => ((await b.status()).rateLimits as { fleet: { present: number } }).fleet.present === 3)

  await proxy.cut()
  // Cut off, a spends its share (1) one window after Redis could last have counted it present.
  await eventually(t, 'a spends its share alone', async () => (await a.call('/v2/store/x', 'alone')).status === 200, 20_000)
  const alone = JSON.parse(readFileSync(join(dir, 'quota', 'ledger.json'), 'utf8')) as { member: string, sends: Array<{ id: string }> }
  t.equal(alone.sends.length, 1, 'the file records it')

  // Restarted (its container), Redis reachable again: the same state directory.
  await a.app.close()
  const again = await quotaSidecar(t, { ...env, STATE_DIR: dir }, { ...options, redisUrl: redis.url })
  t.match(again.logs.entries().find((e) => /STATE_DIR/.test(String(e.msg))), { restored: 1 })
  const admin = new Redis(redis.port, '127.0.0.1')
  t.teardown(() => { admin.disconnect() })
  const log = `${redisKeyPrefix(authUrl, CLIENT_ID)}log:3/6s:${RULE}`
  t.ok((await admin.zrange(log, '0', '-1')).includes(alone.sends[0]?.id ?? '-'), 'Redis was told the send made alone')
  t.ok((await admin.zrange(`${redisKeyPrefix(authUrl, CLIENT_ID)}members`, '0', '-1')).includes(alone.member), 'under the same member id')

  const everyone: QuotaSidecar[] = [again, b, c, b, c, again]
  const seen = await Promise.all(everyone.map(async (s, i) => (await s.call(`/v2/store/${i}`, `after${i}`)).status))
  t.ok(seen.filter((s) => s === 200).length <= 3, `at most the limit after the restart (${seen.join(' ')})`)
  t.ok(most(arrivals) <= 3, `never more than 3 within 6 s at TI (${arrivals.map((at) => Math.round(at - (arrivals[0] ?? 0))).join(', ')} ms)`)
})
