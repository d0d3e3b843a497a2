// Redis slower than RATE_LIMIT_REDIS_TIMEOUT_MS never fails a caller and never puts the fleet
// over its budget. Redis is frozen (SIGSTOP: it holds its connections and answers nothing,
// the hang a network partition gives) under load: callers get honest answers without
// waiting much longer than the timeout, each sidecar goes degraded and says so once; frozen
// for less than a window after Redis last counted them present, they send nothing; thawed
// (SIGCONT, its data kept), each returns to Redis, said once, and the budget is shared again.
import { createConnection } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import { dishonesty, eventually, hammer, startFleet, statusOf, type Sidecar } from './fleet.js'

const RULE = '* /v2/store/**'
const REDIS_TIMEOUT_MS = 200
/** How much longer than the Redis timeout a caller may wait, on two loaded shared cores. */
const SLACK_MS = 2000
/** Admission and arrival at the upstream differ by the loopback transit: compared windows are this much shorter. */
const JITTER_MS = 100

t.setTimeout(120_000)

/** The redis-server's process id, from its own INFO. */
async function redisPid (port: number): Promise<number> {
  const socket = createConnection({ host: '127.0.0.1', port })
  socket.setEncoding('utf8')
  socket.write('INFO server\r\n')
  let text = ''
  for await (const chunk of socket) {
    text += chunk as string
    const match = /process_id:(\d+)/.exec(text)
    if (match !== null) { socket.destroy(); return Number(match[1]) }
  }
  throw new Error(`no process_id in INFO: ${text}`)
}

function redisLines (s: Sidecar): Array<{ level: number, msg: string }> {
  return s.logs().filter((e) => /redis/i.test(JSON.stringify({ msg: e.msg, backend: e.backend })) && e.req === undefined && e.res === undefined)
    .map((e) => ({ level: Number(e.level), msg: String(e.msg) }))
}

t.test('Redis frozen under load, then thawed: no caller fails or waits long; fallback and return said once', async (t) => {
  const redis = await startRedis(t)
  const pid = await redisPid(redis.port)
  t.teardown(() => { try { process.kill(pid, 'SIGCONT') } catch {} })
  const { sidecars, upstream } = await startFleet(t, 2, {
    RATE_LIMITS: `${RULE} 10/1s`, RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_REDIS_URL: redis.url, RATE_LIMIT_REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS), ACCESS_LOG: 'false'
  })
  for (const s of sidecars) await eventually(`sidecar ${s.name} on redis`, async () => (await statusOf(s)).rateLimits?.backend, (b) => b === 'redis')
  const linesBefore = sidecars.map((s) => redisLines(s).length)

  const load = hammer(sidecars, '/v2/store/orders', { perSidecar: 2, pauseMs: 50 })
  await sleep(800)
  process.kill(pid, 'SIGSTOP')
  const frozenAt = performance.now()
  for (const s of sidecars) {
    const status = await eventually(`sidecar ${s.name} falls back to memory`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'memory')
    t.equal(status?.redis?.up, false, `sidecar ${s.name}: /status says Redis is not answering`)
  }
  await sleep(Math.max(0, frozenAt + 2500 - performance.now()))
  process.kill(pid, 'SIGCONT')
  const thawedAt = performance.now()
  for (const s of sidecars) {
    await eventually(`sidecar ${s.name} returns to redis`, async () => (await statusOf(s)).rateLimits, (r) => r?.backend === 'redis' && r.redis?.up === true, 30_000)
  }
  await sleep(800)
  await load.stop()

  const seen = load.seen
  // A degraded refusal says when the share is safe to spend: the timeout + the presence TTL
  // (3 s) + one window after the sidecar's last Redis command.
  const maxRetryAfterS = Math.ceil((REDIS_TIMEOUT_MS + 3000 + 1000) / 1000)
  const dishonest = seen.map((s) => ({ via: s.via, why: dishonesty(s, { rule: RULE, reason: 'budget', maxRetryAfterS }) })).filter((d) => d.why !== undefined)
  t.same(dishonest.slice(0, 5), [], `every caller got the upstream's 200 or an honest local 429 (${dishonest.length} of ${seen.length} not)`)
  // A request sent less than a Redis timeout before the thaw may find Redis answering in time
  // (its take waited in the frozen Redis and still met its deadline): what it gets depends on
  // the thaw, not on the fallback.
  const frozen = seen.filter((s) => s.sentAt >= frozenAt && s.sentAt < thawedAt - REDIS_TIMEOUT_MS)
  t.ok(frozen.length > 0 && frozen.every((s) => s.status === 429), `callers were answered while Redis was frozen (${frozen.length}, all 429)`,
    { served: frozen.filter((s) => s.status !== 429).map((s) => ({ via: s.via, status: s.status, sentAt: Math.round(s.sentAt - frozenAt), doneAt: Math.round(s.doneAt - frozenAt) })) })
  const sentFrozen = upstream.arrivals.filter((a) => a.at > frozenAt + JITTER_MS && a.at < thawedAt)
  t.same(sentFrozen.length, 0, 'nothing was sent while Redis was frozen: too short for a sidecar to know its share is safe')
  // Never over 10 in any second, measured at the upstream (less the loopback transit jitter).
  const at = upstream.arrivals.map((a) => a.at).sort((a, b) => a - b)
  const over = at.filter((x, i) => i + 10 < at.length && (at[i + 10] ?? Infinity) - x < 1000 - JITTER_MS)
  t.same(over, [], `the fleet never sent more than 10 in a second (${at.length} sent)`,
    { arrivals: at.map((x) => Math.round(x - frozenAt)), thawedAt: Math.round(thawedAt - frozenAt) })
  t.ok(upstream.arrivals.some((a) => a.at > thawedAt), 'and sent again once Redis answered')
  const slow = seen.filter((s) => s.doneAt - s.sentAt > REDIS_TIMEOUT_MS + SLACK_MS).map((s) => Math.round(s.doneAt - s.sentAt))
  t.same(slow, [], `no caller waited much longer than RATE_LIMIT_REDIS_TIMEOUT_MS (${REDIS_TIMEOUT_MS} ms + ${SLACK_MS} ms)`)
  for (const [i, s] of sidecars.entries()) {
    const lines = redisLines(s).slice(linesBefore[i])
    t.equal(lines.filter((l) => l.level === 40).length, 1, `sidecar ${s.name}: the fallback logged once, as a warning`, { lines })
    const afterWarn = lines.slice(lines.findIndex((l) => l.level === 40) + 1)
    t.equal(afterWarn.filter((l) => l.level === 30).length, 1, `sidecar ${s.name}: the return logged once (info)`, { lines })
    t.same(lines.filter((l) => l.level >= 50), [], `sidecar ${s.name}: no ERROR line about Redis`)
  }
})
