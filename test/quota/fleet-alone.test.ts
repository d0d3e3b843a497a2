// What a sidecar cut off from Redis may spend alone, and from when: one window after the last
// script that could have renewed its presence; a fleet of one only when declared and never
// contradicted; nothing while its ledger is being told to Redis or while a young epoch settles.
// What Redis's answers to a take mean for the caller. (The scripted Redis: fleet-double.ts.)
import t from 'tap'
import { gate, scriptedFleet, TIMEOUT_MS, TIMING } from './fleet-double.js'

const CLOSED = new Error('Connection is closed.')
/** How long after the last presence-renewing script a sidecar alone waits, for a 1 s window. */
const AFTER_MS = TIMEOUT_MS + TIMING.presenceTtlMs + 1_000

t.test('alone, the share is spent from one window after the last script that could renew presence (+ timeout + TTL)', async (t) => {
  type Fleet = Awaited<ReturnType<typeof scriptedFleet>>
  // Each cuts the sidecar off and says when the last presence-renewing script was sent.
  const cases: Array<{ name: string, cut: (f: Fleet) => Promise<number> }> = [
    {
      name: 'a take, the one that failed',
      cut: async (f) => {
        f.double.script.down = CLOSED
        await f.take()
        return f.c.clock.now()
      }
    },
    {
      name: 'a heartbeat (the connection then dropped)',
      cut: async (f) => {
        f.double.script.down = CLOSED
        f.double.emit(false, CLOSED)
        return f.c.clock.now() - 50
      }
    },
    {
      name: 'the reassertion after an outage (the connection dropped again at once)',
      cut: async (f) => {
        f.double.script.down = CLOSED
        f.double.emit(false, CLOSED)
        await f.c.tick(150 + 3 * TIMING.heartbeatMs)
        f.double.script.down = undefined
        await f.c.tick(TIMING.heartbeatMs)
        await f.c.tick(0)
        t.equal(f.store.status().state, 'shared', 'Redis answered the PING, was told the ledger')
        f.double.script.down = CLOSED
        f.double.emit(false, CLOSED)
        return f.c.clock.now()
      }
    }
  ]
  for (const { name, cut } of cases) {
    await t.test(name, async (t) => {
      const f = await scriptedFleet(t, 'GET /a 6/1s')
      // Shared a while, heartbeats every 200 ms; the last one 50 ms ago.
      await f.c.tick(5_050)
      await f.c.tick(0)
      const before = f.double.calls.length
      const lastSent = await cut(f)
      t.equal(f.store.status().state, 'degraded', `${f.double.calls.slice(before).join(', ')}`)
      await f.c.tick(lastSent + AFTER_MS - 1 - f.c.clock.now())
      t.match(await f.take(), { kind: 'degraded', ms: 1 }, 'Redis may still count it present, spending its share')
      await f.c.tick(1)
      for (let i = 0; i < 3; i++) t.match(await f.take(), { kind: 'ok' }, `share ${i + 1} of floor(6 / 2)`)
      t.match(await f.take(), { kind: 'degraded' })
    })
  }
})

t.test('a fleet of one only when declared and never contradicted', async (t) => {
  const overlapping = await scriptedFleet(t, 'GET /a 4/1s', { fleetFloor: 1, before: (s) => { s.fleetSize = 2; s.present = 2 } })
  overlapping.double.script.down = CLOSED
  await overlapping.c.tick(10_000)
  t.match(await overlapping.take(), { kind: 'ok' })
  t.match(await overlapping.take(), { kind: 'ok' })
  t.match(await overlapping.take(), { kind: 'degraded' }, 'declared 1, but two were present (a restart overlapping its earlier run): half each')

  const undeclared = await scriptedFleet(t, 'GET /a 4/1s', { fleetFloor: 0, before: (s) => { s.fleetSize = 1; s.present = 1 } })
  t.equal(undeclared.store.status().size, 1, 'Redis saw one')
  undeclared.double.script.down = CLOSED
  await undeclared.c.tick(10_000)
  t.match(await undeclared.take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'nothing declared: a size seen in Redis may lag a sidecar joining')
})

t.test('while its ledger is being told to Redis, a sidecar admits nothing alone and sends Redis nothing else', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 100/1s', { fleetFloor: 1, before: (s) => { s.fleetSize = 1; s.present = 1 } })
  await f.c.tick(2_000)
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  t.match(await f.take(), { kind: 'ok' }, 'a declared fleet of one, alone')
  const held = gate()
  f.double.script.hold.reassert = held.promise
  f.double.script.down = undefined
  f.double.emit(true)
  await f.c.tick(0)
  t.equal(f.double.count('reassert'), 2, 'the connection is back: the ledger is being told')
  const pings = f.double.count('ping')
  t.match(await f.take(), { kind: 'degraded', ms: TIMING.heartbeatMs }, 'a send admitted now could miss the snapshot')
  t.equal(f.double.count('ping'), pings, 'no PING for it')
  f.double.script.down = CLOSED
  await f.c.tick(5 * TIMING.heartbeatMs)
  t.ok(f.double.count('ping') - pings <= 1, `nor a PING every heartbeat meanwhile (${f.double.count('ping') - pings})`)
  f.double.script.down = undefined
  held.open()
  await f.c.tick(0)
  t.equal(f.store.status().state, 'shared')
})

t.test('a young epoch (Redis restarted empty, sidecars not yet told) holds every budget until it is freshGraceMs old', async (t) => {
  const young = await scriptedFleet(t, 'GET /a 4/1s', { timing: { freshGraceMs: 3_000 }, before: (s) => { s.reassert = () => ({ epochAgeMs: 1_000 }) } })
  t.equal(young.store.status().state, 'settling')
  t.match(await young.take(), { kind: 'degraded', ms: 2_000, lost: true })
  t.match(await young.store.take('upstream', []), { kind: 'ok' }, 'nothing to spend: not held')
  t.equal(young.double.count('take'), 1, 'that one asked Redis')
  await young.c.tick(1_999)
  t.match(await young.take(), { kind: 'degraded', ms: 1, lost: true })
  t.equal(young.store.status().state, 'settling')
  await young.c.tick(1)
  t.match(await young.take(), { kind: 'ok' })
  t.equal(young.store.status().state, 'shared')
  t.equal(young.double.count('take'), 2)

  const dropped = await scriptedFleet(t, 'GET /a 4/1s', { timing: { freshGraceMs: 3_000 }, before: (s) => { s.reassert = () => ({ epochAgeMs: 0 }) } })
  dropped.double.script.down = new Error('Connection is closed.')
  dropped.double.emit(false, dropped.double.script.down)
  t.equal(dropped.store.status().state, 'degraded', 'cut off within the grace: degraded, not settling')

  for (const epochAgeMs of [3_000, 60_000]) {
    const old = await scriptedFleet(t, 'GET /a 4/1s', { timing: { freshGraceMs: 3_000 }, before: (s) => { s.reassert = () => ({ epochAgeMs }) } })
    t.equal(old.store.status().state, 'shared', `an epoch ${epochAgeMs} ms old is trusted`)
    t.match(await old.take(), { kind: 'ok' })
  }
})

t.test('what Redis answers to a take: a budget refusal is a budget (callers wait), a gate is a refusal for lost data; each tells the fleet size', async (t) => {
  const cases = [
    { answer: { code: 'ok' as const }, seen: { kind: 'ok' } },
    { answer: { code: 'budget' as const, ms: 700 }, seen: { kind: 'budget', ms: 700 } },
    { answer: { code: 'cooldown' as const, ms: 5_000 }, seen: { kind: 'cooldown', ms: 5_000 } },
    { answer: { code: 'gated' as const, ms: 9_000 }, seen: { kind: 'degraded', ms: 9_000, lost: true } }
  ]
  for (const { answer, seen } of cases) {
    const f = await scriptedFleet(t, 'GET /a 4/1s')
    f.double.script.take = () => ({ ...answer, fleetSize: 5, present: 4 })
    t.match(await f.take(), seen, answer.code)
    t.match(f.store.status(), { state: 'shared', size: 5, present: 4 }, `${answer.code}: the fleet as Redis counts it`)
  }
})

t.test('the epoch changed under a take: not a failure (no fallback, no warning); the ledger is told again at once', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  f.double.script.take = () => ({ code: 'epoch' })
  t.match(await f.take(), { kind: 'degraded' })
  await f.c.tick(0)
  t.equal(f.double.count('reassert'), 2)
  t.equal(f.store.status().state, 'shared')
  t.equal((await f.metrics.rateLimitRedisFallbacks.get()).values[0]?.value ?? 0, 0)
  t.same(f.warnings(), [])
})

t.test('an answer past its deadline is a failure, named as such: a late take, a late reassertion', async (t) => {
  const take = await scriptedFleet(t, 'GET /a 4/1s')
  take.double.script.take = () => ({ code: 'late' })
  t.match(await take.take(), { kind: 'degraded' })
  t.equal(take.store.status().state, 'degraded')
  t.equal(take.store.status().problem, `no answer within ${TIMEOUT_MS} ms`)

  const reassert = await scriptedFleet(t, 'GET /a 4/1s', { before: (s) => { s.reassert = () => ({ late: true }) } })
  t.match(reassert.store.status(), { state: 'connecting', problem: `no answer within ${TIMEOUT_MS} ms` })
  t.match(await reassert.take(), { kind: 'degraded' })
})

t.test('within a young epoch\'s grace the RateLimit fields say nothing is left until it ends, as takes refuse (a fleet of one too)', async (t) => {
  // An outside review: a fleet of one, up longer than a window, Redis restarted empty: the
  // fields said 3 left while every take was refused for the grace.
  for (const fleetFloor of [1, 2]) {
    const young = await scriptedFleet(t, 'GET /a 3/1s', { fleetFloor, timing: { freshGraceMs: 3_000 }, before: (s) => { s.reassert = () => ({ epochAgeMs: 1_000 }) } })
    // Up longer than the 1 s window: alone, a fleet of one would have its whole budget.
    await young.c.tick(1_500)
    t.same(await young.store.budget(young.rule.id, young.rule.limits), [{ left: 0, resetMs: 500 }], `floor ${fleetFloor}: nothing left for the rest of the grace`)
    t.match(await young.take(), { kind: 'degraded', ms: 500, lost: true })
    await young.c.tick(500)
    t.match(await young.take(), { kind: 'ok' }, 'then shared')
  }
})
