import type { Test } from 'tap'
import { request } from 'undici'
import type { FleetTiming } from '../../src/quota/fleet-store.js'
import { build, startStandIn, type Built } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { scrapeSettled, seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { ID_HEADER, startRecordingUpstream, type Answer, type RecordingUpstream } from '../helpers/recording-upstream.js'

export const HOUR = 3_600_000
export const DAY = 24 * HOUR
const STEP_MS = 4 * 60_000

export interface Seen {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

export interface QuotaSidecar extends Built {
  upstream: RecordingUpstream
  clock: ReturnType<typeof fakeClock>
  /**
   * Moves the fake clock in steps shorter than the token's refresh margin, letting each
   * token refresh (real I/O to the stand-in) finish: the token lives an hour at most.
   */
  advance: (ms: number) => Promise<void>
  /** One request with this id (the recording upstream's plan key); the whole answer read. */
  call: (path: string, id: string, method?: string) => Promise<Seen>
  metrics: () => Promise<Samples>
  status: () => Promise<Record<string, unknown>>
}

/**
 * The sidecar on a fake clock (budgets and cool-downs are timed on it), in front of the
 * recording upstream; the stand-in's tokens last days, so moving the clock needs no refresh.
 */
export interface QuotaSidecarOptions {
  redisUrl?: string
  /** Share these with another sidecar (one credential: one AUTH_URL). */
  authUrl?: string
  upstream?: RecordingUpstream
  /** The system clock (Redis tests: Redis keeps the time there); the fake one otherwise. */
  systemClock?: boolean
  /** The fleet protocol's timing; by default no grace for a new Redis tally (tests start on an empty Redis). */
  quotaTiming?: Partial<FleetTiming>
}

export async function quotaSidecar (t: Test, env: Record<string, string>, options: QuotaSidecarOptions = {}): Promise<QuotaSidecar> {
  const { redisUrl, systemClock = false } = options
  const authUrl = options.authUrl ?? (await startStandIn(t, { tokenLifetimeMs: 3 * DAY })).url
  const upstream = options.upstream ?? await startRecordingUpstream(t)
  const clock = fakeClock()
  const built = await build(t, {
    AUTH_URL: authUrl, UPSTREAM_URL: upstream.url, ...(redisUrl === undefined ? {} : { RATE_LIMIT_REDIS_URL: redisUrl }), ...env
  }, { quotaTiming: options.quotaTiming ?? { freshGraceMs: 0 }, ...(systemClock ? {} : { clock: clock.clock }) })
  return {
    ...built,
    upstream,
    clock,
    advance: tokenSafeAdvance(t, built, clock),
    async call (path, id, method = 'GET') {
      const res = await request(built.proxyUrl + path, { method, headers: { [ID_HEADER]: id } })
      return { status: res.statusCode, headers: res.headers, body: await res.body.text() }
    },
    metrics: () => scrapeSettled(built.adminUrl),
    async status () {
      const res = await request(built.adminUrl + '/status')
      return await res.body.json() as Record<string, unknown>
    }
  }
}

/**
 * Moves a fake clock in steps shorter than the token's refresh margin, each followed by the
 * token refresh it started (real I/O to the stand-in): a token lives an hour at most.
 */
export function tokenSafeAdvance (t: Test, built: Built, clock: ReturnType<typeof fakeClock>): (ms: number) => Promise<void> {
  return async (ms) => {
    for (let left = ms; left > 0; left -= STEP_MS) {
      await clock.tick(Math.min(left, STEP_MS))
      await eventually(t, 'the token refreshed', () => {
        const state = built.app.tokens.state()
        return state.hasValidToken && !state.refreshing
      })
    }
  }
}

export function answer (status: number, headers: Array<[string, string]>, body: string): Answer {
  return { status, headers, body: Buffer.from(body), framing: 'length' }
}

/** Apigee's answers to a SpikeArrest violation: 429, or 500 from older gateways. */
export const SPIKE_ARREST_BODY = '{"fault":{"faultstring":"Spike arrest violation. Allowed rate : 5ps","detail":{"errorcode":"policies.ratelimit.SpikeArrestViolation"}}}'

export const rateLimited = (rule: string, reason: string, action: string): string =>
  seriesKey('store_auth_proxy_rate_limited_total', { rule, reason, action })

export { eventually } from '../helpers/eventually.js'

/** Where the sidecar's budgets and cool-downs live now, from /status. */
export const backendOf = async (s: QuotaSidecar): Promise<string> => ((await s.status()).rateLimits as { backend: string }).backend

/**
 * Shared through Redis (a send through it), then Redis stopped, until a send is admitted alone:
 * when Redis stopped (wall ms). A take late on a busy machine is decided alone and refused (the
 * share not yet safe): each step asks again.
 */
export async function spendingAlone (t: Test, s: QuotaSidecar, redis: { stop: () => Promise<void> }, path: string): Promise<number> {
  await eventually(t, 'shared through Redis', async () => (await backendOf(s)) === 'redis')
  let m = 0
  await eventually(t, 'a send through Redis', async () => (await s.call(path, `shared${m++}`)).status === 200)
  await redis.stop()
  const stoppedAt = Date.now()
  let n = 0
  await eventually(t, 'spending alone', async () => (await s.call(path, `alone${n++}`)).status === 200)
  return stoppedAt
}
