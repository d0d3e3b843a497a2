// The fleet the rollout-gaps tests drive through the store's scripts (rollout-gaps-*.test.ts):
// sidecars declaring sizes of their own on a real Redis, one per test.
import type { Test } from 'tap'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Member } from '../../../src/quota/redis-backend.js'
import type { Limit } from '../../../src/config/rate-limit-rules.js'
import { sizedFleet, type SizedFleet } from '../fleet-redis.js'

export const PREFIX = 'rv:'
export const SCOPE = 'GET /r'
export const limit = (count: number, windowMs: number): Limit => ({ count, windowMs, text: `${count}/${windowMs}ms` })

export type F = SizedFleet
// The fleet's Redis timeout: a release's hold starts up to TTL + timeout after it (releaseAt).
const TIMEOUT_MS = 1_000
const TTL_MS = 1_000
/** `aloneSpanMs`: each member's RATE_LIMIT_ALONE_MAX_MS + longest window (0: none, as an earlier version's). */
export const fleet = async (t: Test, aloneSpanMs = 0): Promise<F> => await sizedFleet(t, PREFIX, { timeoutMs: TIMEOUT_MS, ttlMs: TTL_MS, newRun: true, scope: SCOPE, aloneSpanMs })

/** `m` present, then gone from Redis's sight without leaving (cut off: alive; or killed: dead). */
export async function lapse (f: F, m: Member): Promise<void> {
  m.presenceTtlMs = 30
  await f.join(m)
  await sleep(80)
}

/** Beats `present` (this version's) for `ms`. */
export async function keepPresent (f: F, present: Member[], ms: number): Promise<void> {
  const until = Date.now() + ms
  while (Date.now() < until) { await f.beat(...present); await sleep(100) }
}

/** Keeps `present` present until every release made so far has ended its hold (release start ≤ now + ttl + timeout, then W). */
export async function outlastHolds (f: F, present: Member[], W: number): Promise<void> {
  await keepPresent(f, present, TTL_MS + TIMEOUT_MS + W + 300)
}

export const W = 400

/** The lapsed entries whose time is up: counted (their sizes on record), holding no share. */
export async function ended (f: F): Promise<string[]> {
  const spans = await f.admin.hgetall(`${PREFIX}alone-spans`)
  return (await f.lapsed()).filter((m) => spans[m]?.startsWith('ended:') === true)
}

/** Beats `present` until every lapsed entry has ended by time (at most `ms`); Redis's time when it was seen so. */
export async function beatUntilEnded (f: F, present: Member[], ms: number): Promise<number | undefined> {
  const until = Date.now() + ms
  while (Date.now() < until) {
    await f.beat(...present)
    const lapsed = await f.lapsed()
    if (lapsed.length > 0 && (await ended(f)).length === lapsed.length) {
      const [s, us] = await f.admin.time()
      return Number(s) * 1000 + Math.floor(Number(us) / 1000)
    }
    await sleep(50)
  }
  return undefined
}

/** A fleet whose sidecars span `aloneSpanMs`, with b and c present, both declaring `size`. */
export async function twoPresent (t: Test, aloneSpanMs: number, size: number): Promise<{ f: F, b: Member, c: Member }> {
  const f = await fleet(t, aloneSpanMs)
  const b = f.member('b', size)
  const c = f.member('c', size)
  await f.join(b, c)
  return { f, b, c }
}
