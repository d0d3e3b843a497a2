// Runs one whole-path schedule against a fresh fleet and checks the combined promise of
// where the features meet after every step:
//   never-over    for each rule, TI's arrivals (this process's monotonic clock) in any
//                 interval of W − TRANSIT_MS number at most N;
//   deadline      every caller that stays gets a status line within DEADLINE_MS;
//   hit           an answer from the cache (`Cache-Status: ...; hit` without `fwd=`) never
//                 reached TI, and every 200 of a cached key carries exactly the bytes TI gave
//                 a real fetch of that key;
//   fetch-refusal no caller of a cached key gets a budget refusal (the sidecar's own 429 that
//                 is not a cool-down) while a fetch of that key is in flight at TI, the
//                 caller's sidecar reaching Redis in time;
//   own-500       no caller gets a 500 (TI never answers one: it is the sidecar's own failure);
//   refresh       two refreshes of one stale key are never at TI at once, Redis reachable
//                 (stale refreshes coalesce across the fleet, as misses do);
//   served        a sidecar that served an answer of a key serves that key (200) while the
//                 answer is fresh or within stale=, whatever the token, the budget, TI or
//                 Redis are doing.
// A violation is attributed to a case of the issue where its circumstances say so; one whose
// case is in KNOWN_OPEN is recorded and the run goes on, any other ends the run.
import { setTimeout as sleep } from 'node:timers/promises'
import { quotaView } from '../quota/model/fleet.js'
import { lateByMachine, redisLateByMachine, watchStalls } from '../helpers/stalls.js'
import { call, QUOTA_TIMING, runScope, startFleet, TIMEOUTS, TOKEN_LIFETIME_S, type CallResult, type Fleet } from './fleet.js'
import { KNOWN_OPEN } from './known-open.js'
import { cached, kindOf, pathOf, RATE_LIMITS, RULES, ruleModel, TARGETS, type Command, type FaultKind, type PathKind, type RuleModel } from './schedule.js'

/** Two sends admitted W apart may arrive less than W apart by this much (loopback, a busy event loop): never a budget slack. */
export const TRANSIT_MS = 100
/** The sidecar cuts a caller off at IDLE_TIMEOUT_MS; a status line must come before, give or take a busy machine. */
export const DEADLINE_MS = TIMEOUTS.IDLE_TIMEOUT_MS + 1000
/** The longest from a send's admission to its arrival at TI (a busy event loop, the upstream queue). */
const ARRIVAL_MS = TIMEOUTS.UPSTREAM_QUEUE_TIMEOUT_MS + 100
/** An answer is held to be served only this far inside its stale= end (clocks read at slightly different moments, Age in whole seconds). */
const SERVED_MARGIN_MS = 1200

export type Check = 'never-over' | 'deadline' | 'hit' | 'fetch-refusal' | 'own-500' | 'refresh' | 'served'
export interface Violation { check: Check, case: string | undefined, message: string }

export interface RunReport {
  /** Violations of open cases (KNOWN_OPEN), each once. */
  gated: Violation[]
  /** The first violation of no open case: the run stopped there. */
  violation: Violation | undefined
  kinds: Set<FaultKind>
  steps: number
  calls: number
  /** Calls `served` held to be answered by a stored answer, and how many of them the token could not have helped. */
  servedChecked: number
  servedTokenless: number
  /** Calls `fetch-refusal` judged (a cached key, a fetch of it in flight at TI, Redis reachable). */
  underFetch: number
  hits: number
  /** Judgements not made because the machine took the time (test/helpers/stalls.ts): a late answer, a refusal or refresh with Redis made late. */
  machine: number
  trace: string[]
}

class Stop extends Error {
  readonly violation: Violation
  constructor (violation: Violation) { super(`${violation.check}: ${violation.message}`); this.violation = violation }
}

/** The most arrivals within any interval of `spanMs`, and where. */
function busiest (times: number[], spanMs: number): { count: number, from: number } {
  let best = { count: 0, from: 0 }
  for (let i = 0, j = 0; j < times.length; j++) {
    while ((times[j] ?? 0) - (times[i] ?? 0) > spanMs) i++
    if (j - i + 1 > best.count) best = { count: j - i + 1, from: times[i] ?? 0 }
  }
  return best
}

/** The third assumption's bound: a sidecar cut off from Redis for longer than this after a data loss is outside it. */
const LOSS_WAIT_MS = 3_000
interface Interval { kind: FaultKind | 'oauthDown', s?: number, from: number, to: number, policy?: string }
interface Copy { fetch: string, producedAt: number, generation: number }

export async function runSchedule (size: number, schedule: Command[], runId = 'run', { gate = KNOWN_OPEN } = {}): Promise<RunReport> {
  const scope = runScope()
  const report: RunReport = { gated: [], violation: undefined, kinds: new Set(), steps: 0, calls: 0, servedChecked: 0, servedTokenless: 0, underFetch: 0, hits: 0, machine: 0, trace: [] }
  try {
    const fleet = await startFleet(scope, size, RATE_LIMITS)
    await drive(fleet, size, schedule, runId, report, gate)
  } catch (error) {
    if (!(error instanceof Stop)) throw error
    report.violation = error.violation
  } finally {
    await scope.close()
  }
  return report
}

async function drive (fleet: Fleet, size: number, schedule: Command[], runId: string, report: RunReport, gate: Set<string>): Promise<void> {
  const t0 = performance.now()
  const rel = (at: number): string => `+${Math.round(at - t0)}ms`
  const log = (line: string): void => {
    report.trace.push(`${rel(performance.now())} ${line}`)
    if (process.env.MODEL_DEBUG !== undefined) process.stderr.write(`${runId} ${rel(performance.now())} ${line}\n`)
  }
  /** Faults over time: open ones end at Infinity until healed. */
  const intervals: Interval[] = []
  const open = (kind: Interval['kind'], s?: number): void => { intervals.push({ kind, from: performance.now(), to: Infinity, ...(s === undefined ? {} : { s }) }) }
  const close = (match: (i: Interval) => boolean): void => { for (const i of intervals) if (i.to === Infinity && match(i)) i.to = performance.now() }
  const point = (kind: FaultKind, s?: number): void => { const now = performance.now(); intervals.push({ kind, from: now, to: now, ...(s === undefined ? {} : { s }) }) }
  const during = (from: number, to: number, match: (i: Interval) => boolean): boolean => intervals.some((i) => match(i) && i.from <= to && i.to >= from)
  const sleeps: Array<Promise<void>> = []
  let seq = 0
  const copies: Array<Map<PathKind, Copy>> = Array.from({ length: size }, () => new Map())
  const seenGated = new Set<string>()
  /** Every caller's result by its id (TI's records name it), and through which sidecar. */
  const answered = new Map<string, { s: number, r: CallResult }>()
  const judgedRefreshes = new Set<string>()

  const violate = (v: Violation): void => {
    if (v.case !== undefined && gate.has(v.case)) {
      const key = `${v.check}:${v.case}`
      log(`known open ${v.case} (${v.check}): ${v.message}`)
      if (!seenGated.has(key)) { seenGated.add(key); report.gated.push(v) }
      return
    }
    log(`VIOLATION ${v.check}${v.case === undefined ? '' : ` (${v.case})`}: ${v.message}`)
    throw new Stop(v)
  }

  /** A Redis fault that can reach sidecar `s` (every one when `s` is undefined). */
  const redisFault = (i: Interval, s?: number): boolean =>
    ['freeze', 'slow', 'flush', 'evict'].includes(i.kind) || (i.kind === 'partition' && (s === undefined || i.s === s))
  // The machine is a Redis fault too: the sidecars share this process's event loop, and a
  // loaded one makes their Redis commands late, which the spec treats as Redis not answering.
  // Only what the witness saw taken counts (test/helpers/stalls.ts).
  const witness = watchStalls(() => [fleet.redis.pid])
  /** The machine took a whole Redis timeout of the quota's within [from, to]: some command then was late by its doing. */
  const machineLate = (from: number, to: number): boolean => {
    const late = redisLateByMachine(witness, from, to, TIMEOUTS.RATE_LIMIT_REDIS_TIMEOUT_MS)
    if (late) report.machine += 1
    return late
  }

  // never-over ----------------------------------------------------------------------------
  /** TI's records of a rule's requests. */
  const recordsOf = (rule: RuleModel) => fleet.ti.records.filter((a) => { const p = pathOf(a.target); return p !== undefined && ruleModel(p) === rule })
  const checkNeverOver = (): void => {
    for (const r of Object.values(RULES) as RuleModel[]) {
      const times = recordsOf(r).map((a) => a.at).sort((x, y) => x - y)
      const worst = busiest(times, r.windowMs - TRANSIT_MS)
      if (worst.count <= r.n) continue
      const from = worst.from - r.windowMs
      const to = worst.from + r.windowMs
      const cycled = (kind: FaultKind): boolean => during(from - r.windowMs, to, (i) => i.kind === kind)
      // Outside the guarantee's third assumption (docs/quota-guard.md): Redis lost its data and a
      // sidecar was cut off from it for longer than LOSS_WAIT_MS after, its sends in no ledger
      // Redis hears of. A documented limit, reported; everything else is judged.
      const lossWhileCut = intervals.some((f) => f.kind === 'flush' && f.from >= from - r.windowMs && f.from <= to &&
        intervals.some((p) => p.kind === 'partition' && p.from <= f.from + LOSS_WAIT_MS && p.to > f.from + LOSS_WAIT_MS))
      // allkeys-* may evict the tally itself (a documented limit); volatile-* only keys with a TTL.
      const cause = lossWhileCut
        ? 'assumption-3'
        : during(from, to, (i) => i.kind === 'evict')
          ? (during(from, to, (i) => i.kind === 'evict' && i.policy?.startsWith('allkeys-') === true) ? 'case-2-allkeys' : 'case-2')
          : cycled('replace') ? 'case-3-replace' : cycled('restart') ? 'case-3' : cycled('rollout') ? 'case-3-rollout' : undefined
      violate({
        check: 'never-over',
        case: cause,
        message: `${r.rule} ${r.n}/${r.windowMs}ms: TI received ${worst.count} within ${r.windowMs - TRANSIT_MS} ms from ${rel(worst.from)} (arrivals ${times.map(rel).join(' ')})`
      })
    }
  }

  // One caller ------------------------------------------------------------------------------
  const ownError = (r: CallResult): { error: string, message: string } | undefined => {
    try {
      const parsed = JSON.parse(r.body) as { error?: unknown, message?: unknown }
      return typeof parsed.error === 'string' && typeof parsed.message === 'string' ? { error: parsed.error, message: parsed.message } : undefined
    } catch { return undefined }
  }
  const describe = (r: CallResult): string => r.status === undefined
    ? `no status line (${r.error ?? ''}) after ${Math.round(r.doneAt - r.startedAt)} ms`
    : `${r.status} ${String(r.headers['cache-status'] ?? '')} ${r.status === 200 ? '' : r.body.slice(0, 160)} in ${Math.round(r.doneAt - r.startedAt)} ms`
  const fetchesOf = (path: PathKind) => fleet.ti.records.filter((a) => a.target === TARGETS[path])
  /** TI failing or hanging a fetch of this key during [from, to]. */
  const fetchFailed = (path: PathKind, from: number, to: number): boolean =>
    fetchesOf(path).some((a) => a.at <= to && (a.endAt ?? Infinity) >= from && (a.status !== 200 || (a.endAt ?? Infinity) - a.at > TIMEOUTS.UPSTREAM_TIMEOUT_MS)) ||
    during(from, to, (i) => i.kind === 'tiSlow' || i.kind === 'ti5xx' || i.kind === 'ti429')

  /**
   * For a caller of `path` refused because the budget was spent (at some moment d within its
   * call): the fetches of `path` in flight at d that must have held the budget then, or [] when
   * the budget's other spenders account for it; undefined when it cannot be judged (Redis
   * troubled, a caller left, a fetch of the key ended during the call).
   *
   * The points held at d were admitted within (d − W, d], so reached TI within
   * [startedAt − W, doneAt + ARRIVAL_MS]. Counted as "other" (conservatively, a point that
   * may have come free already counts too): every such catalog arrival but the fetches of
   * `path` still in flight when the refusal was written. Fewer others than N: a fetch of this
   * key, admitted before d, held the budget — the caller should have waited for it.
   */
  const heldByFetch = (path: PathKind, s: number, r: CallResult) => {
    const rule = ruleModel(path)
    const from = r.startedAt - rule.windowMs - TRANSIT_MS
    const to = r.doneAt + ARRIVAL_MS
    if (during(r.startedAt - TIMEOUTS.RATE_LIMIT_REDIS_TIMEOUT_MS, r.doneAt, (i) => redisFault(i, s)) ||
      during(from, r.doneAt, (i) => i.kind === 'flush' || i.kind === 'evict' || i.kind === 'callerLeaves' || i.kind === 'partition' || i.kind === 'freeze' || i.kind === 'slow') ||
      machineLate(from, r.doneAt)) return undefined
    const candidates = recordsOf(rule).filter((a) => a.at >= from && a.at <= to)
    const same = candidates.filter((a) => a.target === TARGETS[path])
    if (same.some((a) => a.endAt !== undefined && a.endAt >= r.startedAt && a.endAt <= r.doneAt)) return undefined
    const inFlight = same.filter((a) => (a.endAt ?? Infinity) > r.doneAt)
    if (inFlight.length === 0) return undefined
    const others = candidates.length - inFlight.length
    return others >= rule.n ? [] : inFlight
  }

  const checkCall = (s: number, path: PathKind, c: { leaveAfterMs?: number }, r: CallResult, expected: Copy | undefined): void => {
    const what = `call ${r.id} (${path} via ${s}): ${describe(r)}`
    const status = String(r.headers['cache-status'] ?? '')
    const reached = fleet.ti.records.some((a) => a.id === r.id)
    // deadline
    if (c.leaveAfterMs === undefined && (r.status === undefined || r.doneAt - r.startedAt > DEADLINE_MS)) {
      // A status line past the deadline is the machine's when it took the excess from this very call.
      const late = r.status === undefined ? undefined : lateByMachine(witness, r, DEADLINE_MS)
      if (late?.excused === true) {
        report.machine += 1
        log(`deadline not judged for ${r.id}: answered in ${Math.round(r.doneAt - r.startedAt)} ms, of which the machine took ${Math.round(late.takenMs)} ms`)
      } else {
        violate({ check: 'deadline', case: cached(path) && fetchFailed(path, r.startedAt, r.doneAt) ? 'case-5' : undefined, message: `${what} (deadline ${DEADLINE_MS} ms${late === undefined ? '' : `; the machine took ${Math.round(late.takenMs)} ms of it`})` })
      }
    }
    // hit
    if (/; hit\b/.test(status)) report.hits += 1
    if (/; hit\b/.test(status) && !/fwd=/.test(status) && reached) violate({ check: 'hit', case: undefined, message: `${what}: answered from the cache, yet it reached TI` })
    if (cached(path) && r.status === 200) {
      const from = (/"fetch":"([^"]*)"/.exec(r.body) ?? [])[1]
      const source = fleet.ti.records.find((a) => a.id === from && a.target === TARGETS[path] && a.status === 200)
      if (source === undefined || source.body !== r.body) {
        violate({ check: 'hit', case: undefined, message: `${what}: ${r.body.length} bytes no fetch of ${TARGETS[path]} was given (names fetch ${from ?? 'none'})` })
      } else {
        const copy = copies[s]?.get(path)
        if (copy === undefined || copy.generation !== fleet.sidecars[s]?.generation || source.at > copy.producedAt) {
          copies[s]?.set(path, { fetch: source.id, producedAt: source.at, generation: fleet.sidecars[s]?.generation ?? -1 })
        }
      }
    }
    // fetch-refusal
    const own = ownError(r)
    // The shared budget's refusal only: a degraded sidecar (Redis late, on a busy machine too) cannot see the fleet's fetch.
    const spent = r.status === 429 && own?.error === 'UPSTREAM_RATE_LIMITED' && /^the budget of .* is spent/.test(own.message)
    if (cached(path) && c.leaveAfterMs === undefined && spent) {
      const held = heldByFetch(path, s, r)
      if (held !== undefined) {
        report.underFetch += 1
        if (held.length > 0) {
          violate({ check: 'fetch-refusal', case: 'case-1', message: `${what}: the budget was held by fetches of ${TARGETS[path]} still in flight (${held.map((a) => `${a.id} at TI ${rel(a.at)}–${a.endAt === undefined ? '' : rel(a.endAt)}`).join(', ')})` })
        }
      }
    }
    // own-500
    if (r.status === 500) violate({ check: 'own-500', case: during(-Infinity, r.doneAt, (i) => i.kind === 'foreign') ? 'case-7' : undefined, message: what })
    // served
    const lifeMs = (ruleModel(path).cache?.freshMs ?? 0) + (ruleModel(path).cache?.staleMs ?? 0)
    if (expected !== undefined && c.leaveAfterMs === undefined && r.doneAt < expected.producedAt + lifeMs - SERVED_MARGIN_MS) {
      report.servedChecked += 1
      const tokenless = during(r.startedAt - TOKEN_LIFETIME_S * 1000, r.doneAt, (i) => i.kind === 'oauthDown')
      if (tokenless) report.servedTokenless += 1
      if (r.status !== 200) {
        // After the OAuth API is back, a sidecar may stay without a token for its retry backoff (up to 30 s).
        const cause = own?.error === 'TOKEN_UNAVAILABLE' && during(-Infinity, r.doneAt, (i) => i.kind === 'oauthDown')
          ? 'case-4'
          : r.status === undefined && fetchFailed(path, r.startedAt, r.doneAt) ? 'case-5' : undefined
        violate({ check: 'served', case: cause, message: `${what}: sidecar ${s} served ${expected.fetch}'s answer (from TI at ${rel(expected.producedAt)}), within cache= + stale= until ${rel(expected.producedAt + lifeMs)}` })
      }
    }
  }

  const burst = async (c: Extract<Command, { op: 'burst' }>): Promise<void> => {
    const results = await Promise.all(c.callers.map(async (k) => {
      await sleep(k.delayMs)
      const s = k.s % size
      const sidecar = fleet.sidecars[s]
      if (sidecar === undefined) return undefined
      const copy = copies[s]?.get(c.path)
      const expected = copy !== undefined && copy.generation === sidecar.generation ? copy : undefined
      const id = `${runId}.${++seq}.${s}.${c.path}`
      const r = await call(sidecar.built.proxyUrl, TARGETS[c.path], id, { timeoutMs: DEADLINE_MS + 5000, ...(k.leaveAfterMs === undefined ? {} : { leaveAfterMs: k.leaveAfterMs }) })
      if (k.leaveAfterMs !== undefined) intervals.push({ kind: 'callerLeaves', s, from: r.startedAt, to: r.doneAt + TIMEOUTS.UPSTREAM_TIMEOUT_MS })
      return { s, k, r, expected }
    }))
    // Answers of fetches still being written: let TI's records settle before judging.
    await sleep(20)
    for (const one of results) {
      if (one === undefined) continue
      report.calls += 1
      log(`call ${one.s} ${c.path}${one.k.leaveAfterMs === undefined ? '' : ` (leaves after ${one.k.leaveAfterMs} ms)`}: ${describe(one.r)}`)
      checkCall(one.s, c.path, one.k, one.r, one.expected)
      answered.set(one.r.id, { s: one.s, r: one.r })
    }
    if (cached(c.path)) checkRefreshes(c.path)
  }

  /** Refreshes (`fwd=stale`) of `path` at TI: two at once from sidecars reaching Redis is a refresh the fleet did not coalesce. */
  const checkRefreshes = (path: PathKind): void => {
    const refreshes = fetchesOf(path).filter((a) => /fwd=stale/.test(String(answered.get(a.id)?.r.headers['cache-status'] ?? '')))
    for (const [i, a] of refreshes.entries()) {
      for (const b of refreshes.slice(i + 1)) {
        const sa = answered.get(a.id)?.s
        const sb = answered.get(b.id)?.s
        if (sa === sb || a.at > (b.endAt ?? Infinity) || b.at > (a.endAt ?? Infinity)) continue
        const from = Math.min(a.at, b.at) - ruleModel(path).windowMs
        if (during(from, Math.max(a.at, b.at), (f) => redisFault(f, sa) || redisFault(f, sb) || ['restart', 'replace', 'rollout'].includes(f.kind)) ||
          machineLate(from, Math.max(a.at, b.at))) continue
        const key = `${a.id}+${b.id}`
        if (judgedRefreshes.has(key)) continue
        judgedRefreshes.add(key)
        violate({ check: 'refresh', case: 'case-6', message: `${a.id} (sidecar ${String(sa)}) and ${b.id} (sidecar ${String(sb)}) both refreshed ${TARGETS[path]} at TI at once (${rel(a.at)}, ${rel(b.at)})` })
      }
    }
  }

  // Faults ------------------------------------------------------------------------------
  let frozen = false
  let evicting = false
  const evict = async (policy: string): Promise<void> => {
    if (frozen) return
    const info = await fleet.admin.info('memory')
    const used = Number(/used_memory:(\d+)/.exec(info)?.[1] ?? '0')
    await fleet.admin.config('SET', 'maxmemory-policy', policy)
    await fleet.admin.config('SET', 'maxmemory', String(used + 64 * 1024))
    evicting = true
    open('evict')
    const opened = intervals.at(-1)
    if (opened !== undefined) opened.policy = policy
    // Another cache's entries (a second credential's catalog, say) fill what is left.
    for (let i = 0; i < 8; i++) await fleet.admin.set(`other-cache:${runId}:${i}`, 'y'.repeat(24 * 1024), 'PX', 20_000).catch(() => {})
    const evicted = /evicted_keys:(\d+)/.exec(await fleet.admin.info('stats'))?.[1]
    log(`evicting (${policy}, maxmemory ${used + 64 * 1024}): ${evicted ?? '?'} keys evicted so far`)
  }
  /** Rewrites every cache entry in Redis in another layout: `headers` named `fields`, `initialAgeMs` named `ageMs`; status, lifetimes and body kept. */
  const foreign = async (): Promise<number> => {
    // A fetch's answer reaches Redis a moment after its caller: wait for it (1 s at most).
    let keys: string[] = []
    for (const by = performance.now() + 1000; keys.length === 0 && performance.now() < by; await sleep(20)) {
      // The sidecars' entries only: not another cache's keys (`evict` writes other-cache:*).
      keys = (await fleet.admin.keys('store-auth-proxy:*:cache:*')).filter((k) => !k.includes('cache-fill:'))
    }
    let rewritten = 0
    for (const key of keys) {
      const value = await fleet.admin.getBuffer(key)
      if (value === null || value.length < 4) continue
      const length = value.readUInt32BE(0)
      const { headers, initialAgeMs, ...rest } = JSON.parse(value.subarray(4, 4 + length).toString()) as Record<string, unknown>
      const json = Buffer.from(JSON.stringify({ ...rest, fields: headers, ageMs: initialAgeMs, layout: 2 }))
      const head = Buffer.alloc(4)
      head.writeUInt32BE(json.length)
      // A Redis at its maxmemory (the evict fault) refuses the write, as it would a foreign sidecar's.
      const written = await fleet.admin.set(key, Buffer.concat([head, json, value.subarray(4 + length)]), 'KEEPTTL')
        .catch((err: Error) => { if (err.message.startsWith('OOM')) return null; throw err })
      if (written !== null) rewritten += 1
    }
    return rewritten
  }

  const heal = async (): Promise<void> => {
    if (frozen) { fleet.redis.thaw(); frozen = false }
    await Promise.all(sleeps.splice(0))
    if (evicting) { await fleet.admin.config('SET', 'maxmemory', '0'); evicting = false }
    for (const s of fleet.sidecars) await s.redisProxy.heal()
    fleet.oauth.setDown(false)
    fleet.ti.setMode({ kind: 'ok' })
    close(() => true)
  }

  /** Until every sidecar answers through Redis with the whole fleet present (3 s at most). */
  const settle = async (): Promise<void> => {
    const by = performance.now() + 3000
    for (;;) {
      const views = await Promise.all(fleet.sidecars.map(async (s) => await quotaView(s.built.adminUrl)))
      if (views.every((v) => v?.backend === 'redis' && v.degraded !== true && (v.fleet === null || v.fleet?.present === size))) break
      if (performance.now() > by) { log(`not settled: ${JSON.stringify(views)}`); break }
      await sleep(QUOTA_TIMING.heartbeatMs / 2)
    }
  }

  const step = async (c: Command): Promise<void> => {
    const kind = kindOf(c)
    if (kind !== undefined) report.kinds.add(kind)
    if (c.op !== 'burst') log(JSON.stringify(c))
    switch (c.op) {
      case 'burst': return await burst(c)
      case 'wait': await sleep(c.ms); return
      case 'settle': await settle(); return
      case 'freeze': if (!frozen) { fleet.redis.freeze(); frozen = true; open('freeze') } return
      case 'slow':
        if (frozen) return
        sleeps.push(fleet.redis.sleep(c.ms).catch(() => {}))
        intervals.push({ kind: 'slow', from: performance.now(), to: performance.now() + c.ms })
        return
      case 'flush':
        if (frozen) return
        await fleet.admin.flushall()
        point('flush')
        return
      case 'foreign':
        if (frozen) return
        point('foreign')
        log(`${await foreign()} entries rewritten`)
        return
      case 'evict': if (!evicting) await evict(c.policy); return
      case 'partition': {
        const proxy = fleet.sidecars[c.s % size]?.redisProxy
        if (proxy === undefined || proxy.mode !== 'open') return
        if (c.how === 'cut') await proxy.cut()
        else proxy.stall()
        open('partition', c.s % size)
        return
      }
      case 'restart':
      case 'replace': {
        const s = c.s % size
        if (fleet.sidecars[s]?.redisProxy.mode !== 'open') report.kinds.add('cycleWhileCut')
        point(c.op, s)
        await fleet.cycle(s, c.op)
        // The sidecar's memory went with it; the interval lasts while a new run may lack what the old one knew.
        point(c.op, s)
        return
      }
      case 'rollout': {
        const s = c.s % size
        point('rollout', s)
        await fleet.cycle(s, 'replace', size + 1)
        point('rollout', s)
        return
      }
      case 'tokenLapse':
        fleet.oauth.setDown(true)
        open('oauthDown')
        // Every token held now lapses within its lifetime.
        await sleep(TOKEN_LIFETIME_S * 1000 + 200)
        return
      case 'tiSlow': fleet.ti.setMode({ kind: 'slow', ms: c.ms }); open('tiSlow'); return
      case 'ti5xx': fleet.ti.setMode({ kind: '5xx' }); open('ti5xx'); return
      case 'ti429': fleet.ti.setMode({ kind: '429', retryAfterS: c.retryAfterS }); open('ti429'); return
      case 'heal': await heal()
    }
  }

  // Every sidecar holds a token and shares the budgets through Redis before the first step.
  await settle()
  // A new Redis's epoch is young: its grace passes before the first caller.
  await sleep(QUOTA_TIMING.freshGraceMs)
  log(`fleet of ${size}: ${RATE_LIMITS}`)
  try {
    for (const c of schedule) {
      report.steps += 1
      await step(c)
      checkNeverOver()
    }
  } finally {
    witness.stop()
    await heal().catch(() => {})
  }
}
