// The members of a version-mixing run (version-mix-run.ts): each id run by one process at a
// time, on this version (the store, redis-backend.ts) or the earlier one (its frozen scripts,
// attacks/earlier-version.ts), and what TI receives from them: the sends Redis admitted (their
// scores in the log) and those a cut-off process sends alone, as many as it may and as early.
import type { Redis } from 'ioredis'
import type { Limit } from '../../../src/config/rate-limit-rules.js'
import type { Member, ReassertLimit, RedisStore } from '../../../src/quota/redis-backend.js'
import type { EarlierVersion } from '../attacks/earlier-version.js'
import type { Mix, Version } from './version-mix-schedule.js'

export const N = 12
export const W = 400
const LIMIT: Limit = { count: N, windowMs: W, text: `${N}/${W}ms` }
const SCOPE = 'GET /mix'
export const TTL_MS = 500
export const TIMEOUT_MS = 300
/** This version's RATE_LIMIT_ALONE_MAX_MS, shortened. */
const ALONE_MAX_MS = 1_000

type State = 'present' | 'cut' | 'dead' | 'stopped'
/** `size`: the fleet size its last script told (never below its own), which its share alone divides. */
export interface Proc { member: Member, version: Version, state: State, expiry: number, size: number }
export const running = (p: Proc): boolean => p.state === 'present' || p.state === 'cut'

export function createMixFleet (store: RedisStore, earlier: EarlierVersion, admin: Redis, mix: Mix, prefix: string) {
  /** Every send TI receives, at Redis's time. */
  const sends: number[] = []
  /** Each id's sends alone, as its ledger in STATE_DIR holds them across its processes. */
  const ledgers = mix.versions.map(() => [] as Array<{ id: string, at: number }>)
  let seq = 0
  const memberOf = (i: number, version: Version, vouches: boolean, epoch: string): Member =>
    ({ id: `m${i}`, presenceTtlMs: TTL_MS, fleetFloor: mix.floors[i] ?? mix.size, epoch, ...(version === 'current' ? { aloneSpanMs: ALONE_MAX_MS + W, vouches } : {}) })
  const procs: Proc[] = mix.versions.map((version, i) => ({ member: memberOf(i, version, false, ''), version, state: 'stopped', expiry: 0, size: 0 }))

  const redisNow = async (): Promise<number> => {
    const [s, us] = await admin.time()
    return Number(s) * 1000 + Math.floor(Number(us) / 1000)
  }
  /** After a script: its presence's expiry as Redis has it (spending alone starts one W after), the size it told. */
  const renewed = async (p: Proc, fleetSize: number): Promise<void> => {
    p.expiry = Number(await admin.zscore(`${prefix}members`, p.member.id) ?? p.expiry)
    p.size = Math.max(fleetSize, p.member.fleetFloor)
  }
  /** Its ledger's sends alone still in the window, told again as its reassertion does. */
  const told = (i: number, now: number): ReassertLimit[] =>
    [{ scope: SCOPE, limit: LIMIT, sends: (ledgers[i] ?? []).filter((s) => s.at > now - W).map((s) => ({ id: s.id, ageMs: now - s.at })) }]
  const join = async (i: number, p: Proc, newRun: boolean): Promise<void> => {
    const tell = told(i, await redisNow())
    let fleetSize: number
    if (p.version === 'current') {
      const reply = await store.reassert(p.member, tell, 'e', newRun)
      p.member.epoch = reply.epoch
      fleetSize = reply.fleetSize
    } else {
      fleetSize = (await earlier.join(p.member, newRun, tell)).fleetSize
    }
    p.state = 'present'
    await renewed(p, fleetSize)
  }

  return {
    procs,
    sends,
    redisNow,
    join,
    /** A new process for id `i` on `version` (the one before, if running, dies): a new run. */
    start: async (i: number, version: Version, vouches: boolean): Promise<void> => {
      const p: Proc = { member: memberOf(i, version, vouches, await admin.get(`${prefix}epoch`) ?? ''), version, state: 'present', expiry: 0, size: 0 }
      procs[i] = p
      await join(i, p, true)
    },
    beat: async (p: Proc): Promise<void> => {
      await renewed(p, (p.version === 'current' ? await store.heartbeat(p.member, []) : await earlier.beat(p.member)).fleetSize)
    },
    take: async (p: Proc): Promise<boolean> => {
      const id = `s${seq++}`
      const { ok, fleetSize } = p.version === 'current'
        ? await store.take(p.member, SCOPE, [LIMIT], id).then((r) => ({ ok: r.code === 'ok', fleetSize: r.fleetSize }))
        : await earlier.take(p.member, SCOPE, [LIMIT], id)
      await renewed(p, fleetSize)
      if (ok) sends.push(Number(await admin.zscore(`${prefix}log:${LIMIT.text}:${SCOPE}`, id)))
      return ok
    },
    leave: async (p: Proc): Promise<void> => {
      p.state = 'stopped'
      if (p.version === 'current') await store.leave(p.member); else await admin.zrem(`${prefix}members`, p.member.id)
    },
    /**
     * What `procs[i]` (cut off, alive) sends alone at `now`: all its share's room (⌊N / the size
     * its last script told⌋ in any W), from one W after its presence expired; this version's until RATE_LIMIT_ALONE_MAX_MS
     * after its last script ran (at most its expiry − TTL), the earlier one's without end.
     */
    spendAlone: (i: number, now: number): number => {
      const p = procs[i]
      const ledger = ledgers[i]
      if (p === undefined || ledger === undefined || p.state !== 'cut') return 0
      const may = now >= p.expiry + W && (p.version === 'earlier' || now < p.expiry - TTL_MS + ALONE_MAX_MS)
      const room = may ? Math.floor(N / p.size) - ledger.filter((s) => s.at > now - W).length : 0
      for (let k = 0; k < room; k++) {
        ledger.push({ id: `m${i}-a${seq++}`, at: now })
        sends.push(now)
      }
      return Math.max(0, room)
    },
    lapsed: async (): Promise<string[]> => await admin.zrange(`${prefix}lapsed`, '0', '-1')
  }
}
export type MixFleet = ReturnType<typeof createMixFleet>
