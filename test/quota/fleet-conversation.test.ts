// The fleet store's conversation with Redis and what it tells operators: why Redis is not
// used (credentials refused apart from other faults, each change logged once), the backend
// gauges, what a heartbeat's answer changes, cool-downs carried to Redis on recovery, and
// nothing sent or logged after close. (The scripted Redis: fleet-double.ts.)
import t from 'tap'
import { gate, scriptedFleet, TIMING } from './fleet-double.js'

const CLOSED = new Error('Connection is closed.')
const NOAUTH = new Error('NOAUTH Authentication required.')
const TIMED_OUT = new Error('Command timed out')

t.test('why Redis is not used: shown always, logged once per change with the reason and the URL; credentials refused are logged even while cut off', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s', { before: (s) => { s.down = CLOSED } })
  t.match(f.store.status(), { state: 'connecting', problem: 'not reachable' })
  t.match(f.warnings(), [{ redis: 'redis://127.0.0.1:6379', reason: 'not reachable' }])
  t.equal(f.warnings().length, 1)

  // Redis answers the PING, then refuses the credentials on the reassertion.
  f.double.script.down = undefined
  const readClock = f.double.redis.readClock
  f.double.redis.readClock = async () => { throw NOAUTH }
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.match(f.store.status(), { state: 'connecting', problem: /^redis refused our credentials \(NOAUTH\)/ })
  t.equal(f.warnings().length, 2)
  t.match(f.warnings()[1], { redis: 'redis://127.0.0.1:6379', reason: /NOAUTH/ })
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.equal(f.warnings().length, 2, 'the same refusal again: not logged again')

  f.double.redis.readClock = async () => { throw TIMED_OUT }
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.match(f.store.status(), { state: 'connecting', problem: 'Command timed out' }, 'the reason shown follows')
  t.equal(f.warnings().length, 2, 'another fault while cut off: shown, not logged')

  f.double.redis.readClock = readClock
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.match(f.store.status(), { state: 'shared', problem: undefined })
  t.equal(f.warnings().length, 2, 'recovery is no warning')
  t.match(f.logs.entries().filter((e) => e.level === 30).at(-1), { redis: 'redis://127.0.0.1:6379', fleetSize: 2, present: 2 })

  f.double.script.down = CLOSED
  await f.take()
  t.match(f.store.status(), { state: 'degraded', problem: 'Connection is closed.' })
  t.match(f.warnings().at(-1), { reason: 'Connection is closed.' })
  t.equal(f.warnings().length, 3)
})

t.test('the backend gauges: redis 1 and memory 0 while shared, the other way round while cut off', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  t.equal(await f.backend('redis'), 1)
  t.equal(await f.backend('memory'), 0)
  f.double.script.down = CLOSED
  await f.take()
  t.equal(await f.backend('redis'), 0)
  t.equal(await f.backend('memory'), 1)
})

t.test('Redis lost its data: said once, with its URL, and counted', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s', { before: (s) => { s.reassert = () => ({ lost: true }) } })
  t.match(f.warnings(), [{ redis: 'redis://127.0.0.1:6379', msg: /lost its data/ }])
  t.equal((await f.metrics.rateLimitRedisDataLost?.get())?.values[0]?.value, 1)
})

t.test('a heartbeat: a late one changes nothing; a new epoch gets the ledger told again; a lost connection or refused credentials cut it off, a timeout does not', async (t) => {
  const late = await scriptedFleet(t, 'GET /a 4/1s', { fleetFloor: 0, before: (s) => { s.fleetSize = 3; s.present = 3 } })
  late.double.script.heartbeat = () => ({ code: 'late', fleetSize: 0, present: 0 })
  await late.c.tick(TIMING.heartbeatMs)
  await late.c.tick(0)
  t.match(late.store.status(), { state: 'shared', size: 3, present: 3 }, 'the fleet as last counted')
  t.equal(late.double.count('reassert'), 1)

  const epoch = await scriptedFleet(t, 'GET /a 4/1s')
  epoch.double.script.heartbeat = () => ({ code: 'epoch' })
  await epoch.c.tick(TIMING.heartbeatMs)
  await epoch.c.tick(0)
  t.equal(epoch.double.count('reassert'), 2, 'told again')
  t.equal(epoch.store.status().state, 'shared')

  for (const [err, state] of [[CLOSED, 'degraded'], [NOAUTH, 'degraded'], [TIMED_OUT, 'shared']] as const) {
    const f = await scriptedFleet(t, 'GET /a 4/1s')
    f.double.redis.heartbeat = async () => { throw err }
    await f.c.tick(TIMING.heartbeatMs)
    await f.c.tick(0)
    t.equal(f.store.status().state, state, err.message)
  }
})

t.test('cool-downs: begun while cut off, they reach Redis on recovery with what is left of them; a longer one in Redis is held here', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  t.equal(f.store.coolDown('GET /a', { retryAfterMs: 5_000, baseMs: 1_000, maxMs: 60_000 }), 5_000)
  t.equal(f.double.count('cooldown'), 0, 'not sent to a Redis that does not answer')
  await f.c.tick(1_000)
  f.double.script.down = undefined
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.equal(f.store.status().state, 'shared')
  t.match(f.double.cooledDown, [{ scope: 'GET /a', request: { retryAfterMs: 3_800, maxMs: 3_800 } }])

  f.double.script.coolDown = () => 30_000
  f.store.coolDown('GET /b', { retryAfterMs: 2_000, baseMs: 1_000, maxMs: 60_000 })
  await f.c.tick(0)
  t.equal(f.store.cooldowns.left('GET /b'), 30_000, 'another sidecar\'s longer cool-down holds here too')
  t.same(f.cooled, ['GET /b'])
  f.double.script.coolDown = (request) => request.retryAfterMs ?? 0
  f.store.coolDown('upstream', { retryAfterMs: 2_000, baseMs: 1_000, maxMs: 60_000 })
  await f.c.tick(0)
  t.same(f.cooled, ['GET /b'], 'the same length from Redis: nothing new to hold')
})

t.test('not reachable at start: Redis is asked again every heartbeat, with no request needed', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s', { before: (s) => { s.down = CLOSED } })
  f.double.script.down = undefined
  await f.c.tick(TIMING.heartbeatMs)
  await f.c.tick(0)
  t.equal(f.store.status().state, 'shared')
})

t.test('the connection\'s events: down while shared cuts it off; up tells the ledger; down never does', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  f.double.script.down = CLOSED
  f.double.emit(false, CLOSED)
  t.equal(f.store.status().state, 'degraded')
  t.equal(f.double.count('reassert'), 1)
  f.double.script.down = undefined
  f.double.emit(true)
  await f.c.tick(0)
  t.equal(f.double.count('reassert'), 2)
  t.equal(f.store.status().state, 'shared')
})

t.test('after close nothing is sent to Redis, counted or logged, however long the clock runs', async (t) => {
  const f = await scriptedFleet(t, 'GET /a 4/1s')
  const held = gate()
  f.double.script.hold.heartbeat = held.promise
  await f.c.tick(TIMING.heartbeatMs)
  t.equal(f.double.count('heartbeat'), 1, 'a heartbeat in flight')
  const inFlight = f.store.take('GET /a', f.rule.limits)
  await f.store.close()
  f.double.script.down = CLOSED
  held.open()
  await inFlight
  const calls = f.double.calls.length
  await f.c.tick(10 * TIMING.heartbeatMs)
  t.same(f.double.calls.slice(calls), [], 'no heartbeat, PING or reassertion')
  t.same(f.warnings(), [], 'the take failing after close is not a fallback')
  t.equal((await f.metrics.rateLimitRedisFallbacks.get()).values[0]?.value ?? 0, 0)

  const cut = await scriptedFleet(t, 'GET /a 4/1s', { before: (s) => { s.down = CLOSED } })
  await cut.store.close()
  cut.double.script.down = undefined
  const after = cut.double.calls.length
  t.match(await cut.take(), { kind: 'degraded' })
  await cut.c.tick(10 * TIMING.heartbeatMs)
  t.same(cut.double.calls.slice(after), [], 'a request decided alone after close asks Redis nothing')
})
