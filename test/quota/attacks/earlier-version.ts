// The earlier version's scripts (main at 5ed80a9: holds without an end by time), frozen in
// fixtures/ as the Lua it ran, for the schedules where one member id runs both versions (a
// rolling update, or a rollback keeping STATE_DIR). Written once, from the repository's root:
//   git show 5ed80a9:src/quota/redis-scripts.ts > /tmp/earlier-scripts.ts && node -e "import('/tmp/earlier-scripts.ts').then((s) => {
//     const fs = require('node:fs'); const at = s.TAKE.indexOf('\nif late(tonumber')
//     fs.writeFileSync('test/quota/attacks/fixtures/earlier-prelude.lua', s.TAKE.slice(0, at))
//     for (const n of ['TAKE', 'REASSERT', 'HEARTBEAT']) fs.writeFileSync('test/quota/attacks/fixtures/earlier-' + n.toLowerCase() + '.lua', s[n].slice(at)) })"
// (each script is its shared prelude + its own part). Called as that version's redis-backend.ts
// called them: eight fleet keys (no alone-spans), no span among the arguments.
import { readFileSync } from 'node:fs'
import type { Redis } from 'ioredis'
import type { Limit } from '../../../src/config/rate-limit-rules.js'
import type { Member, ReassertLimit } from '../../../src/quota/redis-backend.js'
import { PREFIX } from './rollout-fleet.js'

const fixture = (name: string): string => readFileSync(new URL(`fixtures/earlier-${name}.lua`, import.meta.url), 'utf8')
const PRELUDE = fixture('prelude')
const SCRIPTS = { take: PRELUDE + fixture('take'), reassert: PRELUDE + fixture('reassert'), heartbeat: PRELUDE + fixture('heartbeat') }
/** No deadline: the scripts never answer late. */
const NO_DEADLINE = -1

/** A member on the earlier version: its scripts against the fleet's Redis. Each tells the fleet size (the present, or the member's size if more). */
export interface EarlierVersion {
  /** Its reassertion, telling `told` again: `newRun`, a process's first contact (a restart keeping its id). */
  join: (m: Member, newRun?: boolean, told?: readonly ReassertLimit[]) => Promise<{ fleetSize: number }>
  beat: (m: Member) => Promise<{ fleetSize: number }>
  /** `ok`: a take of `sendId` admitted. */
  take: (m: Member, scope: string, limits: readonly Limit[], sendId: string) => Promise<{ ok: boolean, fleetSize: number }>
}

/** `timeoutMs`: the fleet's RATE_LIMIT_REDIS_TIMEOUT_MS (rollout-fleet.ts's by default); releases count it. */
export function earlierVersion (admin: Redis, { prefix = PREFIX, timeoutMs = 1_000 } = {}): EarlierVersion {
  const fleetKeys = ['epoch', 'members', 'lapsed', 'released', 'tally', 'floors', 'released-floors', 'held-sizes'].map((k) => prefix + k)
  const key = (scope: string, suffix: string): string => `${prefix}${suffix}:${scope}`
  const limitKeys = (scope: string, l: Limit): string[] => [key(scope, `log:${l.text}`), key(scope, `gate:${l.text}`)]
  const memberArgs = (m: Member): Array<string | number> => [NO_DEADLINE, m.id, m.presenceTtlMs, m.fleetFloor, m.epoch]
  return {
    join: async (m, newRun = true, told = []) => {
      const epoch = await admin.get(`${prefix}epoch`)
      if (epoch !== null) m.epoch = epoch
      const keys = [...fleetKeys, ...told.flatMap((l) => limitKeys(l.scope, l.limit))]
      const sends = told.flatMap((l) => [l.limit.windowMs, l.sends.length, ...l.sends.flatMap((s) => [s.id, Math.max(0, Math.round(s.ageMs))])])
      const reply = await admin.eval(SCRIPTS.reassert, keys.length, ...keys, ...memberArgs(m), 'e', newRun ? 1 : 0, ...sends, 0, 0, timeoutMs) as unknown[]
      m.epoch = String(reply[5])
      return { fleetSize: Number(reply[2]) }
    },
    beat: async (m) => {
      const reply = await admin.eval(SCRIPTS.heartbeat, fleetKeys.length, ...fleetKeys, ...memberArgs(m), timeoutMs) as unknown[]
      return { fleetSize: Number(reply[1]) }
    },
    take: async (m, scope, limits, sendId) => {
      const keys = [...fleetKeys, key(scope, 'cooldown'), ...limits.flatMap((l) => limitKeys(scope, l))]
      const reply = await admin.eval(SCRIPTS.take, keys.length, ...keys, ...memberArgs(m), sendId, ...limits.flatMap((l) => [l.count, l.windowMs]), timeoutMs) as unknown[]
      return { ok: Number(reply[0]) === 0, fleetSize: Number(reply[2]) }
    }
  }
}
