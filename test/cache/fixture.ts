// The read cache's test bench: a stand-in TI store API that records every request it gets and
// answers as the test says (now, or when the test lets it), and sidecars in front of it on a
// fake clock (budgets and cache lifetimes move without sleeping) or the system clock (Redis).
import type { IncomingHttpHeaders } from 'node:http'
import type { Test } from 'tap'
import { request } from 'undici'
import { build, startStandIn, type Built } from '../helpers/build.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { startUpstream } from '../helpers/upstream.js'
import { tokenSafeAdvance } from '../quota/sidecar.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, scrapeSettled, seriesKey, type Samples } from '../helpers/metrics-scrape.js'

export const HOUR = 3_600_000
export const DAY = 24 * HOUR
export const CATALOG = '/v2/store/products/catalog'

export interface TiAnswer {
  status: number
  headers?: Record<string, string | string[]>
  body: string | Buffer
  /** Send the head and this many bytes of the body, then cut the connection. */
  cutAfter?: number
  /** Send the head and this many bytes of the body, then nothing more (the answer stays open). */
  stallAfter?: number
}

export interface Ti {
  url: string
  /** Every request TI received: path and query, and headers. */
  received: Array<{ method: string, url: string, headers: IncomingHttpHeaders }>
  /** What TI answers next (default: 200 with the catalog). */
  answer: (fn: (req: { method: string, url: string, headers: IncomingHttpHeaders }) => TiAnswer) => void
  /** Holds every answer until `release()`. */
  hold: () => void
  release: () => void
  /** How many requests wait for an answer now. */
  waiting: () => number
}

/** A catalog-like JSON body of about `bytes`. */
export function catalogBody (bytes = 8_000): string {
  const items: string[] = []
  let size = 2
  for (let i = 0; size < bytes; i++) {
    const item = JSON.stringify({ id: `PART-${i}`, description: 'Operational amplifier, low power', price: 0.42 + i, stock: 1000 + i })
    items.push(item)
    size += item.length + 1
  }
  return `[${items.join(',')}]`
}

export async function startTi (t: Test): Promise<Ti> {
  let answer: Parameters<Ti['answer']>[0] = () => ({ status: 200, headers: { 'content-type': 'application/json' }, body: catalogBody() })
  let holding = false
  const held: Array<() => void> = []
  // The recording upstream, answering once the request is read whole.
  const upstream = await startUpstream(t, (req, res, seen) => {
    const respond = (): void => {
      const a = answer(seen)
      const body = Buffer.from(a.body)
      res.writeHead(a.status, { 'content-length': String(body.length), ...a.headers })
      if (a.stallAfter !== undefined) {
        res.write(body.subarray(0, a.stallAfter))
        return
      }
      if (a.cutAfter === undefined) {
        res.end(req.method === 'HEAD' ? undefined : body)
        return
      }
      res.write(body.subarray(0, a.cutAfter), () => { res.socket?.destroy() })
    }
    if (holding) held.push(respond)
    else respond()
  })
  return {
    url: upstream.url,
    received: upstream.received,
    answer: (fn) => { answer = fn },
    hold: () => { holding = true },
    release: () => {
      holding = false
      for (const respond of held.splice(0)) respond()
    },
    waiting: () => held.length
  }
}

export interface Seen {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: string
}

export interface CacheSidecar extends Built {
  clock: ReturnType<typeof fakeClock>
  /** Moves the fake clock in steps, letting the token refresh between them (a token lives an hour at most). */
  advance: (ms: number) => Promise<void>
  get: (path: string, headers?: Record<string, string>, method?: string) => Promise<Seen>
  metrics: () => Promise<Samples>
  status: () => Promise<Record<string, unknown>>
}

export interface CacheSidecarOptions {
  redisUrl?: string
  /** Share budgets and cached answers with another sidecar (one credential: one AUTH_URL). */
  authUrl?: string
  /** The system clock (Redis keeps the time there); a fake one otherwise. */
  systemClock?: boolean
}

export async function cacheSidecar (t: Test, ti: Ti, env: Record<string, string>, options: CacheSidecarOptions = {}): Promise<CacheSidecar> {
  const authUrl = options.authUrl ?? (await startStandIn(t, { tokenLifetimeMs: 3 * DAY })).url
  const clock = fakeClock()
  const built = await build(t, {
    AUTH_URL: authUrl, UPSTREAM_URL: ti.url, ...(options.redisUrl === undefined ? {} : { RATE_LIMIT_REDIS_URL: options.redisUrl }), ...env
  }, { quotaTiming: { freshGraceMs: 0 }, ...(options.systemClock === true ? {} : { clock: clock.clock }) })
  return {
    ...built,
    clock,
    advance: tokenSafeAdvance(t, built, clock),
    async get (path, headers = {}, method = 'GET') {
      const res = await request(built.proxyUrl + path, { method, headers })
      return { status: res.statusCode, headers: res.headers, body: await res.body.text() }
    },
    metrics: () => scrapeSettled(built.adminUrl),
    async status () {
      const res = await request(built.adminUrl + '/status')
      return await res.body.json() as Record<string, unknown>
    }
  }
}

/** Waits until exactly `n` proxied requests are in the sidecar (arrived, not yet answered). */
export async function inFlight (t: Test, s: { adminUrl: string }, n: number): Promise<void> {
  await eventually(t, `${n} requests in flight`, async () =>
    ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === n)
}

/**
 * A caller's whole wait is one fetch: token (at hand), queue, TI's timeout; the idle timeout is
 * just above it, below two fetches (the second waiter of a serial retry was cut off there).
 */
export const ONE_FETCH_ENV = {
  RATE_LIMITS: 'GET /v2/store/** 100/1h cache=1h',
  RATE_LIMIT_MAX_WAIT_MS: '0',
  TOKEN_WAIT_MS: '100',
  UPSTREAM_QUEUE_TIMEOUT_MS: '200',
  UPSTREAM_TIMEOUT_MS: '3000',
  IDLE_TIMEOUT_MS: '4500'
}
