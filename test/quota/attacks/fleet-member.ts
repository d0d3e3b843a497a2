// In-process fleet members for the attack tests: the real fleet store over the real Redis
// scripts on a real redis-server, each member on its own fake clock (its heartbeats fire only
// when the test moves that clock), with a switch that cuts this member alone off from Redis
// (a partition of some sidecars: every command fails as a timeout would) and a hold on the
// reassertion's answer (a slow Redis, for that one reply).
import pino from 'pino'
import { Redis } from 'ioredis'
import type { Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import { createMetrics } from '../../../src/metrics.js'
import { createFleetStore, type FleetTiming } from '../../../src/quota/fleet-store.js'
import { createRedisStore, type RedisStore } from '../../../src/quota/redis-backend.js'
import { parseRules, type Rule } from '../../../src/config/rate-limit-rules.js'
import { fakeClock } from '../../helpers/fake-clock.js'

/** The fleet starts on an empty Redis (no grace: the suite does the same). Long enough that real time passing between steps never makes a script late or a presence lapse. */
export const TIMEOUT_MS = 10_000
export const TIMING: Partial<FleetTiming> = { presenceTtlMs: 60_000, freshGraceMs: 0 }
const PREFIX = 'store-auth-proxy:attack:'

export function ruleOf (text: string): Rule {
  const { rules, problems } = parseRules(text, 'RATE_LIMITS')
  if (problems.length > 0 || rules[0] === undefined) throw new Error(problems.join('\n'))
  return rules[0]
}

export interface Member {
  readonly store: ReturnType<typeof createFleetStore>
  readonly clock: ReturnType<typeof fakeClock>
  /** Cuts this member off from Redis (true) or heals the partition (false). */
  cut: (cut: boolean) => void
  /** Holds the next reassertion's answer until `release()`; resolves when it is held. */
  holdReassert: () => { held: Promise<void>, release: () => void }
  /** Takes one point; true when the send was admitted (the caller would reach TI). */
  send: () => Promise<boolean>
}

function partitionable (real: RedisStore) {
  const state = { cut: false, hold: undefined as { entered: () => void, gate: Promise<void> } | undefined }
  const guard = (): void => { if (state.cut) throw new Error('Command timed out') }
  const redis: RedisStore = {
    ...real,
    async readClock () { guard(); await real.readClock() },
    async take (...args) { guard(); return await real.take(...args) },
    async reassert (...args) {
      guard()
      const reply = await real.reassert(...args)
      const hold = state.hold
      state.hold = undefined
      if (hold !== undefined) { hold.entered(); await hold.gate }
      return reply
    },
    async heartbeat (...args) { guard(); return await real.heartbeat(...args) },
    async refund (...args) { guard(); await real.refund(...args) },
    async coolDown (...args) { guard(); return await real.coolDown(...args) },
    async ping () { return !state.cut && await real.ping() }
  }
  return { redis, state }
}

/** A member started (its store started); `cut`: cut off from Redis from the start. */
export async function member (t: Test, url: string, rule: Rule, fleetFloor: number, { timing = TIMING, cut = false } = {}): Promise<Member> {
  const clock = fakeClock()
  const real = createRedisStore({ url, timeoutMs: TIMEOUT_MS, prefix: PREFIX, clock: clock.clock })
  const { redis, state } = partitionable(real)
  state.cut = cut
  const store = createFleetStore({
    redis,
    clock: clock.clock,
    log: pino({ level: 'silent' }),
    metrics: createMetrics({ defaultMetrics: false, rateLimitRedis: true }),
    rules: [rule],
    redisTimeoutMs: TIMEOUT_MS,
    fleetFloor,
    timing,
    onCooldown: () => {}
  })
  await store.start()
  t.teardown(() => store.close())
  return {
    store,
    clock,
    cut: (cut) => { state.cut = cut },
    holdReassert () {
      let entered = (): void => {}
      let release = (): void => {}
      const held = new Promise<void>((resolve) => { entered = resolve })
      const gate = new Promise<void>((resolve) => { release = resolve })
      state.hold = { entered, gate }
      return { held, release }
    },
    async send () { return (await store.take(rule.id, rule.limits)).kind === 'ok' }
  }
}

/** Members started one after the other, all with the same RATE_LIMIT_FLEET_SIZE. */
export async function fleetOf (t: Test, url: string, rule: Rule, fleetFloor: number, count: number): Promise<Member[]> {
  const members: Member[] = []
  for (let i = 0; i < count; i++) members.push(await member(t, url, rule, fleetFloor))
  return members
}

/** Sends `n` requests through a member; how many were admitted. */
export async function sendMany (m: Member, n: number): Promise<number> {
  let admitted = 0
  for (let i = 0; i < n; i++) if (await m.send()) admitted++
  return admitted
}

/** Waits (polling, at most 10 s) until `check` holds. */
export async function until (check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (check()) return
    await sleep(10)
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** A plain client for what an operator (or a crash) does to Redis. */
export function adminClient (t: Test, url: string): Redis {
  const client = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 1 })
  t.teardown(() => { client.disconnect() })
  return client
}
