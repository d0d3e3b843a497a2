// A rollout gap, end to end (an outside review's reproduction): real in-process sidecars, one
// redis-server behind a fault proxy per sidecar, the stand-in TI; orders 3/4s, three sidecars
// declaring 3. s0 is cut off and stays so, alive: it spends ⌊3/3⌋ = 1 alone. s1 and s2 are
// rolled out declaring 4 (the chart's 2 -> 3 replicas), then each new pod dies without leaving
// and is replaced: two dead entries declaring 4 and s0's declaring 3 are lapsed. Two present
// and the largest size 4: one is released, the oldest, s0's (alive). Its size must stay
// held: else the dead entries are held at ⌊3/4⌋ = 0 and TI gets 3 from the new pods + s0's 1.
// Never more than three sidecars run. The control keeps size 3.
import t from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { call, QUOTA_TIMING, runScope, startFleet, type CallResult } from './fleet.js'
import { ORDERS, RATE_LIMITS, TARGETS } from './schedule.js'

t.setTimeout(180_000)

/** The most arrivals within any `spanMs`. */
function busiest (times: number[], spanMs: number): number {
  let best = 0
  for (let i = 0, j = 0; j < times.length; j++) {
    while ((times[j] ?? 0) - (times[i] ?? 0) > spanMs) i++
    best = Math.max(best, j - i + 1)
  }
  return best
}

async function shared (adminUrl: string): Promise<boolean> {
  try {
    const res = await request(adminUrl + '/status', { headersTimeout: 2000, bodyTimeout: 2000 })
    const doc = await res.body.json() as { rateLimits?: { backend?: string, degraded?: boolean } }
    return doc.rateLimits?.backend === 'redis' && doc.rateLimits.degraded !== true
  } catch {
    return false
  }
}

for (const newSize of [3, 4]) {
  t.test(`a cut-off sidecar released while alive, new pods declaring ${newSize}${newSize === 3 ? ' (control)' : ''}: TI gets at most the budget`, async (t) => {
    const scope = runScope()
    t.teardown(() => scope.close())
    const fleet = await startFleet(scope, 3, RATE_LIMITS)
    const sidecar = (i: number) => {
      const s = fleet.sidecars[i]
      if (s === undefined) throw new Error(`no sidecar ${i}`)
      return s
    }
    const settle = async (which: number[]): Promise<void> => {
      for (const by = performance.now() + 10_000; performance.now() < by; await sleep(100)) {
        if ((await Promise.all(which.map(async (i) => await shared(sidecar(i).built.adminUrl)))).every(Boolean)) return
      }
      t.fail(`sidecars ${which.join(', ')} not shared in 10 s`)
    }
    await settle([0, 1, 2])
    await sleep(QUOTA_TIMING.freshGraceMs + 200)
    await sidecar(0).redisProxy.cut()
    await sleep(1000)
    await fleet.cycle(1, 'replace', newSize)
    await fleet.cycle(2, 'replace', newSize)
    await settle([1, 2])
    for (const i of [1, 2]) {
      // The new pod dies without leaving (its node lost): cut off, then replaced.
      await sidecar(i).redisProxy.cut()
      await fleet.cycle(i, 'replace', newSize)
      await sleep(1200)
      await sidecar(i).redisProxy.heal()
      await settle([1, 2])
      await sleep(500)
    }
    // Past the release's hold (its start ≤ now + TTL + timeout, then a window).
    await sleep(QUOTA_TIMING.presenceTtlMs + 500 + ORDERS.windowMs + 500)
    const t0 = performance.now()
    const results: CallResult[] = await Promise.all([0, 0, 1, 2, 1, 2].map(async (s, k) =>
      await call(sidecar(s).built.proxyUrl, TARGETS.orders, `c${k}.${s}`, { timeoutMs: 8000 })))
    t.ok(results.some((r) => r.status === 200), 'some were sent')
    const times = fleet.ti.records.filter((a) => a.target === TARGETS.orders && a.at >= t0).map((a) => a.at).sort((x, y) => x - y)
    const worst = busiest(times, ORDERS.windowMs - 100)
    t.ok(worst <= ORDERS.n, `orders at TI within ${ORDERS.windowMs - 100} ms: ${worst} (limit ${ORDERS.n})`)
  })
}
