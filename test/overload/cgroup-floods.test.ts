// The built sidecar, run as the image runs it, inside a memory cgroup of its own of 128 MiB
// (test/helpers/cgroup-sidecar.ts, as cgroup-loads.test.ts runs it), holds the floods of
// bench/lib/floods.ts at the sizes the issue names, one after the other: (e) 12,000
// unfinished heads on the admin port; (f) 2,000 unfinished heads of 930 tiny header lines on
// the proxy port; (f') 2,000 whole requests of 930 fields, the upstream holding whatever
// reaches it. Asserted: alive after each; /livez (a new connection every 100 ms, from a
// process of its own) never failing (no 200 within the chart's 2 s probe timeout) for as long
// as a liveness period, so the kubelet would never restart the pod; every connection opened got a status line
// or a close within the listener's header timeout plus SLACK_MS, (f') 431 each and nothing
// upstream, a plain call answered 200 afterwards. Each flood's cgroup peak is printed.
//
// 12–15 s at rest; with both cores kept busy 13–85 s (the file gets 300 s). /livez within 1 s,
// the target, is not met every run (docs/overload.md, Known limits): Node 24 accepts
// one connection per event-loop turn, so a probe queues behind the flood's connections.
//
// Needs root, a memory cgroup this process may make a child of, and room for 12,000 sockets
// in this process's open-file limit; skipped, saying which is missing, elsewhere.
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import { driveFloods, FLOOD_BOUNDS, floodFailures, FULL_FLOODS, LIVENESS_PERIOD_MS, LIVEZ_WITHIN_MS, SLACK_MS, type FloodOutcome } from '../../bench/lib/floods.js'
import { ADMIN_CONNECTIONS_CHECK_MS, ADMIN_HEADERS_TIMEOUT_MS } from '../../src/admin/server.js'
import { DEFAULT_HEADERS_TIMEOUT_MS } from '../../src/config/schema.js'
import { CONNECTIONS_CHECK_MS } from '../../src/proxy/server.js'
import { setUpCgroup, startInCgroup } from '../helpers/cgroup-sidecar.js'

/** Why this process cannot hold the admin flood's sockets, or false. */
function fewFiles (): string | false {
  const soft = Number(/^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1]?.replace('unlimited', 'Infinity') ?? NaN)
  const need = FULL_FLOODS.adminHeads + 1000
  return soft >= need ? false : `open-file limit ${soft}: the admin flood needs ${need}`
}

const cgroup = setUpCgroup(fewFiles)
t.setTimeout(300_000)

t.test('the built sidecar holds an admin-port flood and a heavy-header flood inside a 128 MiB memory cgroup', { skip: typeof cgroup === 'string' ? cgroup : false }, async (t) => {
  if (typeof cgroup === 'string') return
  const sidecar = await startInCgroup(t, cgroup)
  if (sidecar === undefined) return
  const { port, adminPort, upstream, alive } = sidecar
  // The bench's bounds (it cannot import src/) are the listeners' header timeouts plus slack.
  t.equal(FLOOD_BOUNDS.admin.answerWithinMs, ADMIN_HEADERS_TIMEOUT_MS + ADMIN_CONNECTIONS_CHECK_MS + SLACK_MS, 'the admin port\'s bound')
  t.equal(FLOOD_BOUNDS.proxy.answerWithinMs, DEFAULT_HEADERS_TIMEOUT_MS + CONNECTIONS_CHECK_MS + SLACK_MS, 'the proxy port\'s bound')
  const peaks: string[] = []
  const { outcomes, plain } = await driveFloods({
    port,
    adminPort,
    upstream,
    sizes: FULL_FLOODS,
    ...FLOOD_BOUNDS,
    measure: async (load, run) => {
      cgroup.resetPeak()
      const outcome = await run()
      let peak = NaN
      try { peak = cgroup.peakBytes() } catch {}
      peaks.push(`${load.split(' ')[0] ?? load} peak ${(peak / 1024 / 1024).toFixed(1)} MiB, /livez worst ${outcome.livez.worstMs} ms`)
      t.ok(alive(), `${load}: alive after (${cgroup.events()})`)
      return outcome
    }
  })
  t.comment(outcomes.map((o) => `${o.load}: ${o.note}`).join('\n'))
  t.comment(peaks.join('; '))
  t.ok(alive(), `alive after the floods (${cgroup.events()})`)
  for (const o of outcomes) checkFlood(t, o)
  const whole = outcomes[2]
  t.same(whole?.statuses, { 431: whole?.opened }, '(f\') every request of 930 fields answered 431')
  t.equal(whole?.reachedUpstream, 0, '(f\') none reached the upstream')
  t.equal(plain, '200', 'a plain call answered 200 afterwards')
  t.same(floodFailures(outcomes, plain, alive()), [], 'the bench\'s verdict agrees')
})

function checkFlood (t: Test, o: FloodOutcome): void {
  t.equal(o.opened, o.connections, `${o.load}: every connection opened (${JSON.stringify(o.connectErrors)})`)
  t.equal(o.hung, 0, `${o.load}: every connection the listener accepted got a status line or a close within its bound (slowest ${o.slowestMs} ms; ${o.notAccepted} never accepted: their ACK dropped on a full accept queue)`)
  t.ok(o.livez.polls > 0, `${o.load}: /livez polled (${o.livez.polls})`)
  t.ok(o.livez.longestFailingMs < LIVENESS_PERIOD_MS, `${o.load}: /livez never failing for a liveness period (longest ${o.livez.longestFailingMs} ms; ${o.livez.ok} / ${o.livez.polls} within ${LIVEZ_WITHIN_MS} ms, worst ${o.livez.worstMs} ms, ${JSON.stringify(o.livez.failures)})`)
}
