// Runs one schedule against a fresh fleet and checks the quota guarantee after every step
// (the spec: /work/notes/QUOTA-SPEC.md; the product's README quota section):
//   G1  never over: for each rule and each of its limits N/W, the upstream's arrivals of
//       that rule in any interval of length W − TRANSIT_MS number at most N;
//   G2  liveness when healthy: in the states the spec calls healthy, a call the model's
//       sliding-window tally has room for is sent (the upstream sees it), not refused;
//       right after the upstream refused connections this is the refund check: a call
//       that reached nobody spent nothing;
//   G3  every caller answered: a status line, within HANG_MS, never a reset;
//   cool-down: a sidecar that learned of TI's cool-down (its own 429 from TI, or a
//       cool-down refusal it answered) sends nothing of that rule until it ends;
//   cache: an answer from the read cache (`Cache-Status: ...; hit` without `fwd=`) is zero
//       sends (its call never reaches the upstream), and every cached answer carries the
//       bytes TI gave to a real fetch of that path (a stored one: its own fetch's).
import { RECONNECT_MAX_MS } from '../../../src/redis/connection.js'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { dataLossesOf, fallbackByMachine, fallbacksOf, lateByMachine, watchStalls } from '../../helpers/stalls.js'
import { call, quotaView, QUOTA_TIMING, REDIS_TIMEOUT_MS, runScope, startFleet, type CallResult, type Fleet, type QuotaView } from './fleet.js'
import { busiest } from './busiest.js'
import { kindOf, PATHS, rateLimitsOf, type Command, type FaultKind, type FleetConfig, type PathKind, type RuleModel } from './schedule.js'

/**
 * A send occupies its slot from the moment a sidecar admits it until W later; the test
 * sees it when it reaches the upstream. Two sends admitted W apart can arrive less than
 * W apart when the first spent longer between admission and arrival (the loopback hop,
 * the sidecar's own steps after admission on a busy event loop) than the second. So
 * arrivals are held to N per W − 100 ms: 100 ms of transit difference, never a budget
 * slack — a fleet spending even one send over N within a window puts N + 1 arrivals
 * within W − 100 ms unless that one send took 100 ms longer than its neighbour to arrive.
 */
export const TRANSIT_MS = 100
/**
 * Every configured wait a call can meet: RATE_LIMIT_MAX_WAIT_MS = 0, a few Redis
 * commands each bounded by RATE_LIMIT_REDIS_TIMEOUT_MS, an upstream on loopback that
 * answers at once or refuses at once; the rest is a loaded event loop.
 */
export const HANG_MS = 10 * REDIS_TIMEOUT_MS + 1500
/** "Connected for a few heartbeats". */
const SETTLED_MS = 3 * QUOTA_TIMING.heartbeatMs

export interface Violation { check: 'G1' | 'G2' | 'G3' | 'cool-down' | 'cache', message: string }

export interface RunReport {
  violation: Violation | undefined
  /** The fault kinds this run went through. */
  kinds: Set<FaultKind>
  calls: number
  /** How many of the schedule's commands ran (all, or up to the one that broke the guarantee). */
  steps: number
  /** Calls made in a healthy state with room in the model: the ones G2 held to be sent. */
  livenessChecked: number
  /** Calls G2 would have held but that met a stall the witness saw (a Redis command made late: degraded by the spec's definition). */
  livenessLate: number
  /** Calls answered past HANG_MS with at least the excess taken by the machine (not judged). */
  lateAnswers: number
  /** The recovery tail was not judged: Redis answered late on a loaded machine. */
  recoveryLate: boolean
  /** Calls the read cache answered: fresh (zero sends, checked), and stale (standing in for a refusal or TI's failure). */
  cacheFresh: number
  cacheStale: number
  trace: string[]
}

class ViolationError extends Error {
  readonly violation: Violation
  constructor (violation: Violation) {
    super(`${violation.check}: ${violation.message}`)
    this.violation = violation
  }
}

const ruleIndexOf = (rules: RuleModel[], path: PathKind): number => rules.findIndex((r) => r.paths.includes(path))
const maxWindowMs = (rules: RuleModel[]): number => Math.max(...rules.flatMap((r) => r.limits.map((l) => l.windowMs)))

interface Learned { rule: number, from: number, until: number, how: string }

/** One schedule against one fleet; stops at the first violation. */
export async function runSchedule (config: FleetConfig, schedule: Command[], runId = 'run'): Promise<RunReport> {
  const scope = runScope()
  const report: RunReport = { violation: undefined, kinds: new Set(), calls: 0, steps: 0, livenessChecked: 0, livenessLate: 0, lateAnswers: 0, recoveryLate: false, cacheFresh: 0, cacheStale: 0, trace: [] }
  try {
    const fleet = await startFleet(scope, config.size, { RATE_LIMITS: rateLimitsOf(config.rules), ...config.env }, config.sidecarEnv)
    await drive(fleet, config, schedule, runId, report)
  } catch (error) {
    if (!(error instanceof ViolationError)) throw error
    report.violation = error.violation
  } finally {
    await scope.close()
  }
  return report
}

async function drive (fleet: Fleet, config: FleetConfig, schedule: Command[], runId: string, report: RunReport): Promise<void> {
  const { rules, size } = config
  const t0 = performance.now()
  const rel = (at: number): string => `+${Math.round(at - t0)}ms`
  const log = (line: string): void => { report.trace.push(`${rel(performance.now())} ${line}`); if (process.env.QUOTA_MODEL_DEBUG !== undefined) process.stderr.write(`${rel(performance.now())} ${line}\n`) }
  // A healed fault is noticed within a reconnection attempt (docs/quota-guard.md: at most 1 s apart).
  const quietMs = maxWindowMs(rules) + QUOTA_TIMING.presenceTtlMs + SETTLED_MS + REDIS_TIMEOUT_MS + RECONNECT_MAX_MS
  let lastFaultAt = -Infinity
  let lastLeaveAt = -Infinity
  let cooldownUntil = -Infinity
  let passwordWrong = false
  const sleeps: Array<Promise<void>> = []
  let slowUntil = -Infinity
  const connectedSince: Array<number | undefined> = new Array(size).fill(undefined)
  const views: Array<QuotaView | undefined> = new Array(size).fill(undefined)
  const learned: Learned[][] = Array.from({ length: size }, () => [])
  let seq = 0

  const faultActive = (): boolean =>
    !fleet.redis.running || fleet.redis.frozen || passwordWrong || performance.now() < slowUntil ||
    fleet.sidecars.some((s) => s.redisProxy.mode !== 'open')
  const noteFaults = (): void => { if (faultActive()) lastFaultAt = performance.now() }

  // "Redis answers in time" is also up to the machine: on a loaded one, this process's
  // event loop (the sidecars', the test's) or redis-server can stall past the timeout, and
  // a sidecar is then degraded by the spec's own definition, for up to PRESENCE_TTL +
  // timeout + W. G2 and G3 excuse only what the witness saw the machine take from the call,
  // or from the Redis command that made its sidecar fall back (test/helpers/stalls.ts). The
  // recovery tail, judged from /status, excuses a stall the probe saw: Redis's PING late or
  // this event loop stalled past the timeout.
  const LATE_MS = REDIS_TIMEOUT_MS
  const degradedSpanMs = QUOTA_TIMING.presenceTtlMs + REDIS_TIMEOUT_MS + maxWindowMs(rules) + SETTLED_MS
  let lateAt = -Infinity
  const lateRecently = (): boolean => performance.now() - lateAt < degradedSpanMs
  const lag = monitorEventLoopDelay({ resolution: 10 })
  lag.enable()
  const probing = { on: true }
  const probe = (async () => {
    while (probing.on) {
      const started = performance.now()
      if (!faultActive()) {
        await Promise.race([fleet.redis.command('PING').catch(() => ''), sleep(4 * LATE_MS)])
        if (performance.now() - started > LATE_MS && !faultActive()) lateAt = performance.now()
      }
      if (lag.max / 1e6 > LATE_MS) lateAt = performance.now()
      lag.reset()
      await sleep(QUOTA_TIMING.heartbeatMs / 2)
    }
  })()
  const witness = watchStalls(() => [fleet.redis.pid])
  const stopProbe = async (): Promise<void> => { probing.on = false; await probe; lag.disable(); witness.stop() }
  /** Every run of every sidecar's log: a restarted sidecar's earlier run said things too. */
  const logsOfRuns = fleet.sidecars.map((s) => s.built.logs)
  /** When a sidecar last found Redis had lost its data (down, restartEmpty): every budget is gated for a window from then. */
  const lostAt = (): number => report.kinds.has('down') || report.kinds.has('restartEmpty')
    ? Math.max(-Infinity, ...logsOfRuns.flatMap(dataLossesOf))
    : -Infinity
  /** Why a G2 call's refusal is the machine's (the witness saw it), or what was seen instead. */
  const stallBehind = (s: number, call: CallResult): { why: string | undefined, seen: string } => {
    const lost = lostAt()
    if (lost >= call.startedAt - maxWindowMs(rules) - TRANSIT_MS) {
      const why = `a sidecar found at ${rel(lost)} that Redis had lost its data (every budget gated for a window)`
      return { why, seen: why }
    }
    return fellBackByMachine(s, call.startedAt - degradedSpanMs, call.doneAt)
  }
  /** Whether sidecar `s`'s last fall back within [from, to] was for a Redis command the machine made late. */
  const fellBackByMachine = (s: number, from: number, to: number): { why: string | undefined, seen: string } => {
    const logs = fleet.sidecars[s]?.built.logs
    const last = (logs === undefined ? [] : fallbacksOf(logs)).filter((f) => f.at <= to && f.at >= from).at(-1)
    if (last === undefined) return { why: undefined, seen: `sidecar ${s} did not fall back from shared budgets from ${rel(from)} to ${rel(to)}` }
    const { excused, takenMs } = fallbackByMachine(witness, last, { timeoutMs: REDIS_TIMEOUT_MS, heartbeatMs: QUOTA_TIMING.heartbeatMs })
    const seen = `sidecar ${s} fell back at ${rel(last.at)} (${last.reason}); the machine took ${Math.round(takenMs)} ms of that command's window`
    return { why: excused ? seen : undefined, seen }
  }
  /** Why every sidecar not settled now is so by the machine's doing (each fell back for a command it made late), if so. */
  const unsettledByMachine = (): string | undefined => {
    const now = performance.now()
    const unsettled = connectedSince.flatMap((since, i) => since === undefined || now - since < SETTLED_MS ? [i] : [])
    const whys = unsettled.map((i) => fellBackByMachine(i, now - degradedSpanMs, now).why)
    return whys.length > 0 && whys.every((w) => w !== undefined) ? whys.join('; ') : undefined
  }

  const poll = async (): Promise<void> => {
    const seen = await Promise.all(fleet.sidecars.map(async (s) => await quotaView(s.built.adminUrl)))
    const now = performance.now()
    seen.forEach((v, i) => {
      views[i] = v
      const connected = v !== undefined && v.backend === 'redis' && v.redisUp !== false && v.degraded !== true &&
        (v.fleet === undefined || (v.fleet.size === size && v.fleet.present === size))
      connectedSince[i] = connected ? (connectedSince[i] ?? now) : undefined
    })
  }
  /** Time passing, with the sidecars' states read every heartbeat. */
  const pass = async (ms: number): Promise<void> => {
    const until = performance.now() + ms
    for (let left = ms; left > 0; left = until - performance.now()) {
      await sleep(Math.min(left, QUOTA_TIMING.heartbeatMs))
      noteFaults()
      await poll()
    }
  }

  /** Time passing until every sidecar has answered through Redis for `forMs` (5 s at most). */
  async function settle (forMs = 0): Promise<void> {
    const by = performance.now() + 5000
    await poll()
    while (performance.now() < by && connectedSince.some((since) => since === undefined || performance.now() - since < forMs)) {
      await pass(QUOTA_TIMING.heartbeatMs / 4)
    }
  }

  const arrivalsOf = (rule: number): number[] => fleet.upstream.arrivals
    .filter((a) => ruleIndexOf(rules, a.id.split('.')[3] as PathKind) === rule)
    .map((a) => a.at).sort((x, y) => x - y)

  const checkNeverOver = (): void => {
    rules.forEach((r, ri) => {
      const times = arrivalsOf(ri)
      for (const { n, windowMs } of r.limits) {
        const worst = busiest(times, windowMs - TRANSIT_MS)
        if (worst.count > n) {
          throw new ViolationError({
            check: 'G1',
            message: `${r.rule} ${n}/${windowMs}ms: the upstream received ${worst.count} within ${windowMs - TRANSIT_MS} ms from ${rel(worst.from)} ` +
              `(arrivals ${times.map(rel).join(' ')})`
          })
        }
      }
    })
  }

  /** Why the spec's G2 does not apply to a call of `rule` now, or undefined: healthy, and the model has room. */
  const notHealthy = (rule: number): string | undefined => {
    const now = performance.now()
    if (faultActive() || fleet.upstreamProxy.mode !== 'open') return 'a fault is on'
    if (now - lastFaultAt < quietMs) return 'a fault ended less than a quiet period ago'
    if (now - lastLeaveAt < maxWindowMs(rules) + TRANSIT_MS) return 'a caller left within the last window'
    if (now < cooldownUntil) return 'a cool-down may hold'
    const unsettled = connectedSince.findIndex((since) => since === undefined || now - since < SETTLED_MS)
    if (unsettled >= 0) return `sidecar ${unsettled} has not been connected for ${SETTLED_MS} ms (/status: ${JSON.stringify(views[unsettled])})`
    const cooling = views.findIndex((v) => v === undefined || v.cooldowns > 0)
    if (cooling >= 0) return `sidecar ${cooling} lists a cool-down`
    // A sidecar back after a data loss gates every budget for a window from when it told Redis its sends.
    if (now - lostAt() < maxWindowMs(rules) + TRANSIT_MS) return `a sidecar found Redis had lost its data at ${rel(lostAt())}`
    const r = rules[rule]
    if (r === undefined) return undefined
    const times = arrivalsOf(rule)
    // The tally counts arrivals; a send was admitted before it arrived, so a slot the model
    // sees free is free in the sidecar (50 ms for clocks read at slightly different moments).
    const full = r.limits.find(({ n, windowMs }) => times.filter((at) => at > now - windowMs - 50).length >= n)
    return full === undefined ? undefined : `no room in ${full.n}/${full.windowMs}ms`
  }

  /**
   * After the schedule: every fault healed and a quiet period passed, the fleet must be
   * healthy again (each /status connected, the fleet size its running count) and send a
   * call of each sidecar: degraded mode ends, it does not degrade to zero.
   */
  const recover = async (): Promise<void> => {
    await heal()
    const item = ruleIndexOf(rules, 'item')
    const lastArrival = Math.max(-Infinity, ...arrivalsOf(item))
    const now = performance.now()
    await pass(Math.max(0, lastFaultAt + quietMs - now, lastLeaveAt + maxWindowMs(rules) + TRANSIT_MS - now, cooldownUntil - now, lastArrival + maxWindowMs(rules) + TRANSIT_MS - now))
    await settle(SETTLED_MS)
    // A cool-down the sidecars list may outlast the model's estimate: a little longer.
    for (const by = performance.now() + 3000; notHealthy(item) !== undefined && performance.now() < by;) await pass(QUOTA_TIMING.heartbeatMs)
    for (let s = 0; s < size; s++) {
      await poll()
      const why = notHealthy(item)
      // A presence that lapsed (fewer present than the fleet) is the same stall seen from the
      // others: a sidecar starved past the presence TTL missed its heartbeats.
      const stalled = views.some((v) => v?.degraded === true || (v?.fleet !== undefined && v.fleet.present < size))
      if (why !== undefined && stalled && lateRecently()) {
        log(`recovery not judged: ${why}; the probe saw Redis answer, or this process stall, past ${LATE_MS} ms at ${rel(lateAt)}`)
        report.recoveryLate = true
        return
      }
      // A sidecar that fell back between two reads of /status, for a command the machine made late.
      const machine = why === undefined ? undefined : unsettledByMachine()
      if (machine !== undefined) {
        log(`recovery not judged: ${why ?? ''}; ${machine}`)
        report.recoveryLate = true
        return
      }
      if (why !== undefined && config.judgeLiveness !== false) throw new ViolationError({ check: 'G2', message: `not healthy again ${Math.round(quietMs)} ms after every fault healed: ${why}` })
      await doCall({ op: 'call', s, path: 'item' })
    }
  }

  const doCall = async (c: Extract<Command, { op: 'call' }>): Promise<void> => {
    const s = c.s % size
    const sidecar = fleet.sidecars[s]
    if (sidecar === undefined) return
    const rule = ruleIndexOf(rules, c.path)
    const id = `${runId}.${++seq}.${s}.${c.path}`
    // TI's answer names the fetch it answered: a cached answer must carry some real fetch's bytes.
    if (c.path === 'cached') fleet.upstream.plan(id, { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ from: id }) })
    if (c.retryAfterS !== undefined) {
      fleet.upstream.plan(id, { status: 429, headers: { 'retry-after': String(c.retryAfterS), 'content-type': 'application/json' }, body: '{"fault":{"faultstring":"Rate limit exceeded"}}' })
    }
    await poll()
    const live = config.judgeLiveness !== false && c.leaveAfterMs === undefined && c.retryAfterS === undefined && notHealthy(rule) === undefined
    const result = await call(sidecar.built.proxyUrl, PATHS[c.path], id, { timeoutMs: HANG_MS + 2000, ...(c.leaveAfterMs === undefined ? {} : { leaveAfterMs: c.leaveAfterMs }) })
    report.calls += 1
    const arrival = fleet.upstream.arrivals.find((a) => a.id === id)
    const what = `${describeCall(result)}${arrival === undefined ? '' : `, reached the upstream at ${rel(arrival.at)}`}`
    log(`call ${s} ${c.path}${c.leaveAfterMs === undefined ? '' : ` (leaves after ${c.leaveAfterMs} ms)`}${c.retryAfterS === undefined ? '' : ` (TI answers 429, Retry-After ${c.retryAfterS})`}${live ? ' [G2]' : ''}: ${what}`)
    if (c.leaveAfterMs !== undefined) lastLeaveAt = performance.now()
    noteFaults()

    if (c.leaveAfterMs === undefined) {
      const elapsed = result.doneAt - result.startedAt
      if (result.status === undefined || result.error !== undefined) {
        throw new ViolationError({ check: 'G3', message: `call ${id}: ${what}, ${Math.round(elapsed)} ms` })
      }
      if (elapsed > HANG_MS) {
        // Answered, but late: the bound holds for a machine that runs us. Excused only when
        // the machine took at least the excess from this very call (the witness's next tick read).
        await sleep(QUOTA_TIMING.heartbeatMs)
        const { excused, takenMs } = lateByMachine(witness, result, HANG_MS)
        if (!excused) {
          throw new ViolationError({ check: 'G3', message: `call ${id}: ${what}, ${Math.round(elapsed)} ms (at most ${HANG_MS}); the machine took ${Math.round(takenMs)} ms of it` })
        }
        report.lateAnswers += 1
        log(`G3 not judged for ${id}: answered in ${Math.round(elapsed)} ms, of which the machine took ${Math.round(takenMs)} ms`)
      }
    }
    const fromCache = checkCached(id, c.path, result, arrival !== undefined)
    if (fromCache === 'fresh') report.cacheFresh += 1
    if (fromCache === 'stale') report.cacheStale += 1
    if (live) {
      report.livenessChecked += 1
      // With room, a call is sent, or (a cached rule) answered by a fresh stored answer.
      if (result.status !== 200 || (arrival === undefined && fromCache !== 'fresh')) {
        // The spec's healthy state needs Redis answering in time: a sidecar whose Redis
        // command the machine made late (in this call, or just before it, between two reads
        // of /status) is degraded by definition. It logs when it fell back and why; the
        // witness says whether the machine took that command's time. A refusal with no fall
        // back, or a fall back with nothing taken, fails; so does a data-loss gate no sidecar logged.
        const after = await quotaView(sidecar.built.adminUrl)
        await sleep(QUOTA_TIMING.heartbeatMs)
        const { why, seen } = stallBehind(s, result)
        if (why === undefined) {
          throw new ViolationError({ check: 'G2', message: `call ${id} in a healthy state with room in the model: ${what}; /status right after: ${JSON.stringify(after)}; ${seen}` })
        }
        report.livenessChecked -= 1
        report.livenessLate += 1
        log(`G2 not judged for ${id}: ${why}`)
      }
    }
    // What this sidecar now knows of a cool-down of this rule.
    if (arrival !== undefined && c.retryAfterS !== undefined && result.status === 429) {
      learned[s]?.push({ rule, from: result.doneAt, until: arrival.at + c.retryAfterS * 1000 - TRANSIT_MS, how: `TI's 429 (Retry-After ${c.retryAfterS}) to ${id}` })
      cooldownUntil = Math.max(cooldownUntil, arrival.at + c.retryAfterS * 1000 + 500)
    }
    const retryAfter = Number(result.headers['retry-after'])
    if (arrival === undefined && result.status === 429 && /cool-down/.test(result.body) && retryAfter > 1) {
      // The header is whole seconds rounded up: at least (Retry-After − 1) s were left.
      learned[s]?.push({ rule, from: result.doneAt, until: result.startedAt + (retryAfter - 1) * 1000 - TRANSIT_MS, how: `its cool-down refusal of ${id} (Retry-After ${retryAfter})` })
      cooldownUntil = Math.max(cooldownUntil, result.startedAt + retryAfter * 1000 + 500)
    }
    const knew = learned[s]?.find((l) => l.rule === rule && l.from <= result.startedAt && arrival !== undefined && arrival.at < l.until)
    if (knew !== undefined && arrival !== undefined) {
      throw new ViolationError({ check: 'cool-down', message: `sidecar ${s} sent ${id} at ${rel(arrival.at)}, inside the cool-down it learned from ${knew.how} (until ${rel(knew.until)})` })
    }
  }

  /** The cache check for one call; how the read cache answered it (`fresh`, `stale`, or not at all). */
  const checkCached = (id: string, path: PathKind, result: CallResult, arrived: boolean): 'fresh' | 'stale' | undefined => {
    const status = String(result.headers['cache-status'] ?? '')
    const hit = /; hit\b/.test(status)
    if (hit && !/fwd=/.test(status) && arrived) throw new ViolationError({ check: 'cache', message: `call ${id} answered from the cache (${status}) also reached the upstream` })
    if (path !== 'cached' || result.status !== 200) return hit ? 'stale' : undefined
    const from = /^\{"from":"([^"]+)"\}$/.exec(result.body)?.[1]
    const source = from === undefined ? undefined : fleet.upstream.arrivals.find((a) => a.id === from)
    if (source === undefined || !from?.endsWith('.cached')) {
      throw new ViolationError({ check: 'cache', message: `call ${id} (${status}) got bytes no fetch of that path was given: ${result.body.slice(0, 120)}` })
    }
    if (/; stored\b/.test(status) && from !== id) throw new ViolationError({ check: 'cache', message: `call ${id} fetched and stored, but got ${from}'s answer` })
    if (!hit) return undefined
    return /detail=(stale|no-refresh)/.test(status) || /ttl=-/.test(status) ? 'stale' : 'fresh'
  }

  const heal = async (): Promise<void> => {
    fleet.redis.thaw()
    if (!fleet.redis.running) await fleet.redis.start()
    if (passwordWrong) { await fleet.redis.setPassword(undefined); passwordWrong = false }
    for (const s of fleet.sidecars) await s.redisProxy.heal()
    await fleet.upstreamProxy.heal()
    await Promise.all(sleeps.splice(0))
  }

  const step = async (c: Command): Promise<void> => {
    const kind = kindOf(c)
    if (kind !== undefined) report.kinds.add(kind)
    const wasFaulty = faultActive()
    if (c.op !== 'call') log(JSON.stringify(c))
    switch (c.op) {
      case 'call': return await doCall(c)
      case 'wait': return await pass(c.ms)
      case 'settle': return await settle()
      case 'freeze': fleet.redis.freeze(); break
      case 'slow':
        if (!fleet.redis.running || fleet.redis.frozen || passwordWrong) break
        slowUntil = performance.now() + c.ms
        sleeps.push(fleet.redis.sleep(c.ms).catch(() => {}))
        break
      case 'down': await fleet.redis.stop(); break
      case 'restartEmpty':
      case 'restartWithData':
        if (passwordWrong) await heal()
        await fleet.redis.restart({ withData: c.op === 'restartWithData' })
        break
      case 'stall': fleet.sidecars[c.s % size]?.redisProxy.stall(); break
      case 'cut': await fleet.sidecars[c.s % size]?.redisProxy.cut(); break
      case 'wrongPassword':
        if (!fleet.redis.running || fleet.redis.frozen || passwordWrong) break
        await fleet.redis.setPassword('not-the-sidecars-password')
        passwordWrong = true
        break
      case 'restartSidecar': {
        await fleet.restartSidecar(c.s % size)
        const restarted = fleet.sidecars[c.s % size]
        if (restarted !== undefined) logsOfRuns.push(restarted.built.logs)
        connectedSince[c.s % size] = undefined
        learned[c.s % size] = []
        break
      }
      case 'upstreamDown':
        await fleet.upstreamProxy.cut()
        // The sidecars (in this process) see their idle upstream connections closed before
        // the next call: a call then meets a refused connection, nothing written.
        await sleep(20)
        break
      case 'heal': await heal(); break
    }
    // When the last Redis or sidecar fault ended (the refused upstream is no such fault:
    // right after it, G2 is the refund check); a slow Redis ends when it wakes.
    if (c.op !== 'upstreamDown' && (c.op !== 'heal' || wasFaulty)) lastFaultAt = performance.now()
    if (c.op === 'slow') lastFaultAt = Math.max(lastFaultAt, slowUntil)
  }

  // The starting state G2 speaks of: every sidecar connected for a few heartbeats.
  await settle(SETTLED_MS)
  log(`fleet of ${size}: ${rateLimitsOf(rules)}`)
  try {
    for (const c of schedule) {
      report.steps += 1
      await step(c)
      checkNeverOver()
    }
    log('recovery')
    await recover()
    checkNeverOver()
  } finally {
    await stopProbe()
    await heal().catch(() => {})
  }
}

function describeCall (r: CallResult): string {
  if (r.status === undefined) return `no answer (${r.error ?? ''})`
  const retryAfter = r.headers['retry-after']
  return `${r.status}${retryAfter === undefined ? '' : ` Retry-After ${String(retryAfter)}`} ${r.body.slice(0, 240).replace(/\s+/g, ' ')}`
}
