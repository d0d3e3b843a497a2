// What the fleet tests share: sidecars as real processes (dist/main.js) sharing one
// credential, an upstream that records when each request arrived, callers that never
// throw, metrics summed over the fleet, and the fixed-window check.
import { createServer, type IncomingMessage } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'
import { Agent, request } from 'undici'
import { CLIENT_ID, CLIENT_SECRET } from '../helpers/build.js'
import { parseMetrics, seriesKey, type Samples } from '../helpers/metrics-scrape.js'
import { runMain, type Running } from '../helpers/process.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'

export const ID_HEADER = 'x-fleet-id'
export const UPSTREAM_BODY = '{"from":"upstream"}'
export const RATE_LIMITED_CONTENT_TYPE = 'application/json; charset=utf-8'

/** One request as the upstream saw it: when (performance.now() in this process) and what. */
export interface Arrival { id: string, method: string, url: string, at: number }

export interface PlannedAnswer { status: number, headers: Record<string, string>, body: string }

/**
 * A real upstream on port 0 recording each request's arrival time. It answers 200 with
 * UPSTREAM_BODY unless the test planned another answer for that request id.
 */
export async function startArrivalUpstream (t: Test) {
  const arrivals: Arrival[] = []
  const plans = new Map<string, PlannedAnswer>()
  const sockets = new Set<Socket>()
  const server = createServer((req: IncomingMessage, res) => {
    const id = String(req.headers[ID_HEADER] ?? '')
    arrivals.push({ id, method: req.method ?? '', url: req.url ?? '', at: performance.now() })
    req.resume()
    req.on('end', () => {
      const plan = plans.get(id) ?? { status: 200, headers: { 'content-type': 'application/json' }, body: UPSTREAM_BODY }
      res.writeHead(plan.status, plan.headers)
      res.end(plan.body)
    })
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy()
    server.close(() => { resolve() })
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    arrivals,
    plan: (id: string, answer: PlannedAnswer) => { plans.set(id, answer) }
  }
}

export type ArrivalUpstream = Awaited<ReturnType<typeof startArrivalUpstream>>

export interface Sidecar {
  name: string
  running: Running
  proxyUrl: string
  adminUrl: string
  /** Every stdout line that is JSON (the sidecar's log). */
  logs: () => Array<Record<string, unknown>>
  /** Everything the process wrote, stdout and stderr. */
  output: () => string
}

/** Starts dist/main.js and waits until both listeners are up and the token is held. */
export async function startSidecar (t: Test, name: string, env: Record<string, string>): Promise<Sidecar> {
  const running = runMain(t, [], { PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, ...env })
  const admin = await running.waitFor(/"listener":"admin","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/, 20_000)
  const proxy = await running.waitFor(/"listener":"proxy","msg":"Server listening at (http:\/\/127\.0\.0\.1:\d+)"/, 20_000)
  await running.waitFor(/access token acquired/, 20_000)
  return {
    name,
    running,
    proxyUrl: proxy[1] ?? '',
    adminUrl: admin[1] ?? '',
    logs: () => running.stdout().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>),
    output: () => running.stdout() + running.stderr()
  }
}

/**
 * `count` sidecars on one credential (one token endpoint, one CLIENT_ID) in front of one
 * upstream, so that with one RATE_LIMIT_REDIS_URL they share budgets and cool-downs.
 */
export async function startFleet (t: Test, count: number, env: Record<string, string>) {
  const tokenEndpoint = await startRecordingTokenEndpoint(t)
  const upstream = await startArrivalUpstream(t)
  const names = ['A', 'B', 'C', 'D', 'E'].slice(0, count)
  const sidecars = await Promise.all(names.map(async (name) => await startSidecar(t, name, { AUTH_URL: tokenEndpoint.url, UPSTREAM_URL: upstream.url, ...env })))
  return { tokenEndpoint, upstream, sidecars }
}

export interface Seen {
  status: number | undefined
  headers: Record<string, string | string[] | undefined>
  body: string
  error: string | undefined
  /** performance.now() when the call was sent and when its answer had been read. */
  sentAt: number
  doneAt: number
  via: string
  id: string
}

// Callers of their own: no connection shared with the metrics scrapes, generous pool.
const callers = new Agent({ connections: 64, pipelining: 0 })

let counter = 0
export function nextId (prefix: string): string {
  counter += 1
  return `${prefix}-${counter}`
}

/** One call through a sidecar; never rejects (a failure is part of what the caller saw). */
export async function callVia (sidecar: Sidecar, path: string, { method = 'GET', id = nextId(sidecar.name) } = {}): Promise<Seen> {
  const sentAt = performance.now()
  try {
    const res = await request(sidecar.proxyUrl + path, { method, headers: { [ID_HEADER]: id }, dispatcher: callers, headersTimeout: 15_000, bodyTimeout: 15_000 })
    const body = await res.body.text()
    return { status: res.statusCode, headers: res.headers, body, error: undefined, sentAt, doneAt: performance.now(), via: sidecar.name, id }
  } catch (error) {
    return { status: undefined, headers: {}, body: '', error: (error as Error).message, sentAt, doneAt: performance.now(), via: sidecar.name, id }
  }
}

export function header (seen: Seen, name: string): string | undefined {
  const value = seen.headers[name]
  return Array.isArray(value) ? value.join(', ') : value
}

/** The sidecar's own JSON error body, if this is one. */
export function ownError (seen: Seen): { error: string, message: string } | undefined {
  try {
    const parsed = JSON.parse(seen.body) as { error?: unknown, message?: unknown }
    if (typeof parsed.error === 'string' && typeof parsed.message === 'string') return { error: parsed.error, message: parsed.message }
  } catch {}
  return undefined
}

/**
 * Why this answer is not an honest one, or undefined when it is: the upstream's own 200,
 * or the sidecar's local 429 UPSTREAM_RATE_LIMITED with an integer Retry-After from 1 to
 * `maxRetryAfterS`, the contract's content type and a message naming `rule` and `reason`.
 */
export function dishonesty (seen: Seen, { rule, reason, maxRetryAfterS }: { rule: string, reason: 'budget' | 'cooldown', maxRetryAfterS: number }): string | undefined {
  if (seen.status === 200) return seen.body === UPSTREAM_BODY ? undefined : `a 200 that is not the upstream's: ${seen.body.slice(0, 100)}`
  if (seen.status !== 429) return `status ${String(seen.status)} ${seen.error ?? ''} ${seen.body.slice(0, 200)}`
  const retryAfter = header(seen, 'retry-after') ?? ''
  if (!/^\d+$/.test(retryAfter) || Number(retryAfter) < 1 || Number(retryAfter) > maxRetryAfterS) return `Retry-After "${retryAfter}" not an integer from 1 to ${maxRetryAfterS}`
  if (header(seen, 'content-type') !== RATE_LIMITED_CONTENT_TYPE) return `content-type ${header(seen, 'content-type') ?? 'none'}`
  const own = ownError(seen)
  if (own?.error !== 'UPSTREAM_RATE_LIMITED') return `not UPSTREAM_RATE_LIMITED: ${seen.body.slice(0, 200)}`
  if (!own.message.includes(rule)) return `the message does not name the rule ${rule}: ${own.message}`
  const word = reason === 'cooldown' ? /cool-down/ : /budget/
  if (!word.test(own.message)) return `the message does not say ${reason === 'cooldown' ? 'cool-down' : 'budget'}: ${own.message}`
  return undefined
}

/**
 * Callers hammering the fleet until `stop()`: `perSidecar` concurrent loops on each
 * sidecar, each calling `path` again `pauseMs` after its last answer.
 */
export function hammer (sidecars: Sidecar[], path: string, { perSidecar = 3, pauseMs = 20 } = {}) {
  const seen: Seen[] = []
  const state = { running: true }
  const loops = sidecars.flatMap((sidecar) => Array.from({ length: perSidecar }, async () => {
    while (state.running) {
      seen.push(await callVia(sidecar, path))
      await sleep(pauseMs)
    }
  }))
  return {
    seen,
    stop: async () => { state.running = false; await Promise.all(loops) }
  }
}

export async function getText (url: string): Promise<{ status: number, body: string }> {
  const res = await request(url)
  return { status: res.statusCode, body: await res.body.text() }
}

export async function scrapeText (sidecar: Sidecar): Promise<string> {
  return (await getText(sidecar.adminUrl + '/metrics')).body
}

/** One scrape of every sidecar once none has a request in flight. */
export async function scrapeFleet (sidecars: Sidecar[]): Promise<Samples[]> {
  const inFlight = seriesKey('store_auth_proxy_requests_in_flight', {})
  const deadline = Date.now() + 10_000
  for (;;) {
    const all = await Promise.all(sidecars.map(async (s) => parseMetrics(await scrapeText(s))))
    if (all.every((m) => (m.get(inFlight) ?? 0) === 0) || Date.now() > deadline) return all
    await sleep(25)
  }
}

/** The sum over the fleet of how much one series grew between two fleet scrapes. */
export function fleetDelta (before: Samples[], after: Samples[], name: string, labels: Record<string, string>): number {
  const key = seriesKey(name, labels)
  return after.reduce((sum, samples, i) => sum + (samples.get(key) ?? 0) - (before[i]?.get(key) ?? 0), 0)
}

/** Every series of `name` grown over the fleet, summed, as `{labels}` → growth. */
export function fleetDeltas (before: Samples[], after: Samples[], name: string): Record<string, number> {
  const out: Record<string, number> = {}
  after.forEach((samples, i) => {
    for (const [key, value] of samples) {
      if (!key.startsWith(name + '{')) continue
      const grew = value - (before[i]?.get(key) ?? 0)
      if (grew !== 0) out[key.slice(name.length)] = (out[key.slice(name.length)] ?? 0) + grew
    }
  })
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)))
}

export async function statusOf (sidecar: Sidecar): Promise<{ rateLimits?: { backend?: string, redis?: { url?: string, up?: boolean } | null, rules?: unknown, cooldowns?: Array<{ rule: string, until: string }> } }> {
  return JSON.parse((await getText(sidecar.adminUrl + '/status')).body) as never
}

/** Polls until `check` holds (or throws after `timeoutMs` with the last value seen). */
export async function eventually<T> (what: string, get: () => Promise<T>, check: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: T = await get()
  while (!check(last)) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms; last seen ${JSON.stringify(last)?.slice(0, 500)}`)
    await sleep(100)
    last = await get()
  }
  return last
}

/**
 * Whether arrival times fit fixed windows of `windowMs` holding at most `limit` each.
 * The contract fixes no alignment (a window may start at its first request, as
 * rate-limiter-flexible's do, or on a grid), so this asks whether SOME sequence of
 * windows [s_k, s_k + W) with s_(k+1) ≥ s_k + W holds at most `limit` requests each;
 * both alignments are such a sequence. Windows hold the moments a sidecar spent a point;
 * a request reaches the upstream up to `jitterMs` later, so an arrival a belongs to
 * window k when s_k ≤ a < s_k + W + jitter. Whatever the alignment, 2 × limit + 1
 * arrivals within W − jitter never fit (an oracle that let each sidecar spend the
 * budget once would put 3 × limit there).
 *
 * Dynamic programming over the sorted arrivals: best[i] is the earliest start the
 * window holding arrivals [j, i) can have when arrivals [0, i) fit; the earliest start
 * leaves the most room to the windows after it.
 */
export function fitsFixedWindows (times: number[], limit: number, windowMs: number, jitterMs: number): { ok: boolean, worst: string } {
  const a = [...times].sort((x, y) => x - y)
  const best: number[] = new Array<number>(a.length + 1).fill(Infinity)
  best[0] = -Infinity
  for (let i = 1; i <= a.length; i++) {
    for (let j = Math.max(0, i - limit); j < i; j++) {
      const prev = best[j] ?? Infinity
      if (prev === Infinity) continue
      const first = a[j] ?? 0
      const last = a[i - 1] ?? 0
      // The earliest start with `last` still inside, and a window length after the previous one.
      const start = Math.max(last - windowMs - jitterMs + 0.001, prev + windowMs)
      if (start <= first && start < (best[i] ?? Infinity)) best[i] = start
    }
  }
  if (best[a.length] !== Infinity) return { ok: true, worst: '' }
  // For the message: the busiest stretch of (W − jitter).
  let worst = 0
  let at = 0
  for (let i = 0, j = 0; i < a.length; i++) {
    while ((a[i] ?? 0) - (a[j] ?? 0) >= windowMs - jitterMs) j++
    if (i - j + 1 > worst) { worst = i - j + 1; at = a[j] ?? 0 }
  }
  return { ok: false, worst: `${worst} arrivals within ${windowMs - jitterMs} ms from t=${Math.round(at - (a[0] ?? 0))} ms (limit ${limit} per ${windowMs} ms)` }
}

/** Counts by a key, for comparing with metrics. */
export function countBy<T> (items: T[], key: (item: T) => string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const item of items) out[key(item)] = (out[key(item)] ?? 0) + 1
  return Object.fromEntries(Object.entries(out).sort(([x], [y]) => (x < y ? -1 : 1)))
}

export const secretsOf = (issued: string[]): string[] => [CLIENT_SECRET, ...issued]

/**
 * The arrivals grouped into windows that each start at their first arrival (the
 * alignment of rate-limiter-flexible's fixed windows), as `+start ms: count`: for
 * the test's comments, so a run shows how the budget was spent.
 */
export function chainWindows (times: number[], windowMs: number): string {
  const a = [...times].sort((x, y) => x - y)
  const out: string[] = []
  let start = -Infinity
  let count = 0
  for (const at of a) {
    if (at >= start + windowMs) {
      if (count > 0) out.push(`+${Math.round(start - (a[0] ?? 0))}ms: ${count}`)
      start = at
      count = 0
    }
    count += 1
  }
  if (count > 0) out.push(`+${Math.round(start - (a[0] ?? 0))}ms: ${count}`)
  return out.join(', ')
}
