// A send decided alone goes out only once STATE_DIR's ledger records it. A write that stalls
// (a FIFO stands in for a stalled disk) past the alone bound must not let it go then: Redis
// ends this sidecar's hold a window after the bound, and TI would count the send past that.
// It is refused as it leaves, unsent (fleet-departures.ts). Control: no stall, it goes.
import { execFileSync } from 'node:child_process'
import { createReadStream, readdirSync, readFileSync } from 'node:fs'
import { link, mkdtemp, rm, unlink } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import { eventually, quotaSidecar, spendingAlone } from './sidecar.js'

t.setTimeout(90_000)
const TIMING = { heartbeatMs: 100, presenceTtlMs: 300, freshGraceMs: 0 }
// Spending alone starts 1.5 s after Redis stops (timeout + TTL + a window): room for A and B before it.
const BOUND_MS = 4_000

/**
 * Whether a thread of this process (the sidecar runs in it) is blocked opening a FIFO for
 * writing, waiting for a reader: Linux's fifo_open sleeps in wait_for_partner (pipe_wait
 * before Linux 5.9).
 */
function blockedOnFifo (): boolean {
  return readdirSync('/proc/self/task').some((tid) => {
    try {
      return /^(wait_for_partner|pipe_wait)$/.test(readFileSync(`/proc/self/task/${tid}/wchan`, 'utf8'))
    } catch {
      return false // the thread ended
    }
  })
}

for (const stalled of [true, false]) {
  t.test(stalled ? 'a send decided alone whose ledger write stalls past the bound is refused as it leaves, unsent' : 'control: no stall, it goes', async (t) => {
    const redis = await startRedis(t)
    const dir = await mkdtemp(join(tmpdir(), 'alone-stall-'))
    t.teardown(async () => { await rm(dir, { recursive: true, force: true }) })
    const s = await quotaSidecar(t, {
      RATE_LIMITS: '* /v2/store/** 100/1s', RATE_LIMIT_MAX_WAIT_MS: '0', RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_ALONE_MAX_MS: String(BOUND_MS), STATE_DIR: dir
    }, { redisUrl: redis.url, systemClock: true, quotaTiming: TIMING })
    const stoppedAt = await spendingAlone(t, s, redis, '/v2/store/a')
    const fifo = join(dir, 'quota', 'ledger.json.tmp')
    if (stalled) execFileSync('mkfifo', [fifo])
    // A's write waits on the FIFO; B, decided while it waits, joins the next write (a file again).
    // B is asked for once A's write waits there, not after a pause: on a busy machine A's
    // request can take longer to reach its write, and B's would reach the FIFO first.
    const a = s.call('/v2/store/a', 'A')
    if (stalled) await eventually(t, "A's write waiting on the FIFO", blockedOnFifo)
    const b = s.call('/v2/store/a', 'B')
    const decidedMs = Date.now() - stoppedAt
    t.ok(decidedMs < BOUND_MS, `B asked for within the bound (${decidedMs} ms after Redis stopped)`)
    if (stalled) {
      await eventually(t, 'past the bound', async () => ((await s.status()).rateLimits as { aloneEnded: boolean }).aloneEnded)
      // The FIFO leaves its path before A's write is let go: B's write, next, makes a file there.
      const held = `${fifo}.held`
      await link(fifo, held)
      await unlink(fifo)
      createReadStream(held).resume()
    }
    const [ra, rb] = await Promise.all([a, b])
    if (!stalled) {
      t.same([ra.status, rb.status, s.upstream.seen('B').length], [200, 200, 1], 'both sent')
      return
    }
    t.equal(s.upstream.seen('A').length + s.upstream.seen('B').length, 0, 'neither reached TI')
    t.equal(ra.status, 429, 'A refused (its own write failed: unrecorded)')
    t.equal(rb.status, 429, 'B refused as it left')
    t.match(rb.body, /waited to be sent.*RATE_LIMIT_ALONE_MAX_MS.*not sent/, 'B: past the alone bound by the time it could leave')
  })
}
