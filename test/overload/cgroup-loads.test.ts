// The built sidecar, run as the image runs it (`npm start`'s node flags, the Dockerfile's
// GLIBC_TUNABLES, the default configuration), inside a memory cgroup of its own of 128 MiB,
// lives through the four loads (bench/lib/four-loads.ts, which `npm run bench:overload`
// drives too): alive after all four, every caller of (b) and (c) given a status line, (a)
// entirely 2xx with no socket error, a plain call answered 200 afterwards, and /livez, polled
// throughout as the floods poll it, never failing for a liveness period.
//
// Shorter than the bench: (a) runs 4 s instead of 8 (9–15 k keep-alive requests on busy
// cores, 43 k at rest), and (d)'s 3000 slowloris connections are held 4 s instead of 12 (the
// peak is while they are all open; the bench holds them past the header timeout to see its
// 408). 16 s at rest; with both cores kept busy 19–40 s, the longest at a load average of 12
// (the bursts' share of the CPU shrinks with the load): the file gets 120 s, not tap's 60.
//
// Needs root, a memory cgroup this process may make a child of (cgroup v1's
// memory.limit_in_bytes, or v2's memory.max) and wrk; skipped, saying which is missing,
// elsewhere. CI runs as root on cgroup v1 and installs wrk before `npm test`.
import { spawn } from 'node:child_process'
import t from 'tap'
import { LIVENESS_PERIOD_MS, watchLivez } from '../../bench/lib/floods.js'
import { driveFourLoads, failures, FULL_LOADS } from '../../bench/lib/four-loads.js'
import { DEFAULT_MAX_CONNECTIONS } from '../../src/config/schema.js'
import { setUpCgroup, startInCgroup } from '../helpers/cgroup-sidecar.js'
import { reapOnExit } from '../helpers/process.js'
import { skipUnless, WRK } from '../helpers/tools.js'

const SIZES = { ...FULL_LOADS, wrkSeconds: 4, slowlorisMs: 4000 }
// /livez within 1 s while the proxy port sheds is measured, not promised: over 1 s in 6 runs
// of 9 in the 128 MiB group on a busy machine (2026-12-02, load 5–18, worst 3.5 s). It shares
// the event loop with the proxy port, and a burst's accepts and reads are one poll phase it
// waits behind; a thread of its own would cost 11 MiB and answer for a wedged loop. The
// promise is the kubelet's: no liveness period failed (docs/overload.md, Known limits).

const cgroup = setUpCgroup(() => skipUnless(WRK))
t.setTimeout(120_000)

t.test('the built sidecar lives through the four loads inside a 128 MiB memory cgroup', { skip: typeof cgroup === 'string' ? cgroup : false }, async (t) => {
  if (typeof cgroup === 'string') return
  const sidecar = await startInCgroup(t, cgroup)
  if (sidecar === undefined) return
  const { port, adminPort, upstream, alive } = sidecar

  const livez = watchLivez(adminPort)
  await livez.first
  const { outcomes, plain } = await driveFourLoads({
    port,
    upstream,
    sizes: SIZES,
    runWrk: async (wrkArgs) => {
      const wrk = spawn('wrk', wrkArgs, { stdio: ['ignore', 'pipe', 'inherit'] })
      reapOnExit(wrk)
      let out = ''
      wrk.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
      await new Promise((resolve) => wrk.once('close', resolve))
      return out
    }
  })
  const polled = await livez.stop()
  const [a, b, c, d] = outcomes
  t.comment(outcomes.map((o) => `${o.load}: ${o.answered} / ${o.callers} answered, ${JSON.stringify(o.classes)}, errors ${JSON.stringify(o.errors)}; ${o.note}`).join('\n'))
  t.ok(alive(), `alive after the four loads (${cgroup.events()})`)
  t.ok((a?.answered ?? 0) > 0, '(a) answered requests')
  t.same(a?.classes, { '2xx': a?.answered }, '(a) entirely 2xx')
  t.same(a?.errors, {}, '(a) no socket error')
  for (const load of [b, c]) {
    t.equal(load?.answered, load?.callers, `${load?.load}: every caller got a status line`)
    t.same(load?.errors, {}, `${load?.load}: no caller without one`)
  }
  t.ok((d?.statuses['503'] ?? 0) >= SIZES.slowloris - DEFAULT_MAX_CONNECTIONS, `(d) the slowloris connections beyond MAX_CONNECTIONS answered 503 (${d?.note})`)
  t.same(d?.errors, {}, '(d) every connection opened')
  t.equal(plain, '200', 'a plain call answered 200 afterwards')
  const livezNote = `worst ${polled.worstMs} ms (connected in ${polled.worstConnectMs}), ${polled.ok} / ${polled.polls} within 2 s, ${JSON.stringify(polled.failures)}`
  t.ok(polled.polls > 0 && polled.longestFailingMs < LIVENESS_PERIOD_MS, `/livez (a new connection every 100 ms, from a process of its own) never failing for a liveness period: longest ${polled.longestFailingMs} ms; ${livezNote}`)
  t.same(failures(outcomes, plain, alive()), [], 'the bench\'s verdict agrees')
})
