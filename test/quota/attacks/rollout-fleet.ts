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

/** Keeps `present` present until every release made so far has ended its hold (release start ≤ now + ttl + timeout, then W). */
export async function outlastHolds (f: F, present: Member[], W: number): Promise<void> {
  const until = Date.now() + TTL_MS + TIMEOUT_MS + W + 300
  while (Date.now() < until) { await f.beat(...present); await sleep(100) }
}

export const W = 400
