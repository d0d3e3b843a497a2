// The four loads a sidecar must live through inside its memory limit, one after the other
// against one process, and the verdict on them. Shared by the benchmark
// (bench/overload-cgroup.ts, which also measures the cgroup around each load) and the test
// (test/overload/cgroup-loads.test.ts, which asserts the verdict):
//   (a) wrk, 100 keep-alive callers                              — entirely 2xx, no socket error;
//   (b) 1000 concurrent 60 KB POSTs, each on its own connection  — every caller a status line;
//   (c) 1500 concurrent calls the upstream answers 401 with a 10 KB body (held back for the
//       replay, replayed once with a new token, answered 401 again) — every caller a status line;
//   (d) 3000 slowloris connections (a header line every second)  — the sidecar alive;
//   (e) only when asked (the bench's --streamed N): N concurrent 1 MiB POSTs, streamed —
//       every caller a status line;
// then a plain call, answered 200. Nothing here reads the repository's layout: the callers
// give the paths, so this module runs from its source (the test) and from dist/ (the bench).
import { readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { Pool } from 'undici'
import { SMALL_PATH } from './targets.js'

export { SMALL_PATH }

export interface LoadSizes {
  /** (a): wrk's duration. */
  wrkSeconds: number
  /** (b): concurrent 60 KB POSTs. */
  posts: number
  /** (c): concurrent calls answered 401. */
  denied: number
  /** (d): slowloris connections, and how long they are held. */
  slowloris: number
  slowlorisMs: number
  /** (e), the bench's option: concurrent POSTs of STREAMED_BYTES each, streamed in 64 KiB writes; 0 (the default) for none. */
  streamed?: number
}

/** The loads as the issue measured them. */
export const FULL_LOADS: LoadSizes = { wrkSeconds: 8, posts: 1000, denied: 1500, slowloris: 3000, slowlorisMs: 12_000 }

const POST_BYTES = 60 * 1024
/** (e): a body four times the 64 KiB the overload manager counts, the replay budget holds, or one read brings. */
export const STREAMED_BYTES = 1024 * 1024
const STREAM_CHUNK = Buffer.alloc(64 * 1024, 's')
const DENIED_BODY_BYTES = 10 * 1024
/** Bounds each caller's wait: a caller still waiting after it got no status line. */
const CALLER_LIMIT_MS = 60_000
/** Between two loads: the last one's connections close and its answers are collected. */
const PAUSE_MS = 1000

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** The Dockerfile's GLIBC_TUNABLES, read from it so the image and the runs cannot drift. */
export function imageGlibcTunables (repo: string): string {
  const match = /^ENV GLIBC_TUNABLES=(\S+)$/m.exec(readFileSync(join(repo, 'Dockerfile'), 'utf8'))
  if (match?.[1] === undefined) throw new Error('Dockerfile: no ENV GLIBC_TUNABLES line')
  return match[1]
}

/**
 * The command that starts `argv` inside a cgroup: a shell writes its own pid to the group's
 * cgroup.procs, then execs the command, so the pid is the command's own and everything it
 * allocates is charged to the group. Exits 97 when the pid cannot be written.
 */
export function inCgroup (procsFile: string, argv: string[]): [string, string[]] {
  return ['sh', ['-c', 'echo $$ > "$1" || exit 97; shift; exec "$@"', 'sh', procsFile, ...argv]]
}

/** The sidecar's environment for the loads: its defaults, the stand-in's demo credentials. */
export function sidecarEnv (ports: { standIn: number, upstream: number, proxy: number, admin: number }, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    AUTH_URL: `http://127.0.0.1:${ports.standIn}`,
    UPSTREAM_URL: `http://127.0.0.1:${ports.upstream}`,
    CLIENT_ID: 'demo-client',
    CLIENT_SECRET: 'Zm9v+YmFy/c2VjcmV0=',
    PORT: String(ports.proxy),
    ADMIN_HOST: '127.0.0.1',
    ADMIN_PORT: String(ports.admin),
    ...extra
  }
}

export interface LoadUpstream {
  port: Promise<number>
  /** From here on, every call is answered 401 with a 10 KB body (or 200 again). */
  deny: (on: boolean) => void
  /** From here on, every call is held unanswered (or, off, those held are reset and calls answered again). */
  hold: (on: boolean) => void
  /** Calls held since the upstream started. */
  held: () => number
  /** Calls received (held or answered) for this path since the upstream started. */
  received: (path: string) => number
  close: () => void
}

/** The upstream: reads each body, then answers 200 with a small JSON, or 401 with 10 KB, or holds it. */
export function startLoadUpstream (): LoadUpstream {
  let denying = false
  let holding = false
  const holds: ServerResponse[] = []
  let heldCalls = 0
  const received = new Map<string, number>()
  const denied = JSON.stringify({ error: 'InvalidApiKeyForGivenResource', detail: 'x'.repeat(DENIED_BODY_BYTES) })
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume()
    const path = (req.url ?? '').split('?')[0] ?? ''
    received.set(path, (received.get(path) ?? 0) + 1)
    if (holding) {
      heldCalls += 1
      holds.push(res)
      return
    }
    req.on('end', () => {
      if (denying) {
        res.writeHead(401, { 'content-type': 'application/json' }).end(denied)
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"tiPartNumber":"LM358BIDR","quantity":1000}')
      }
    })
  })
  server.keepAliveTimeout = 120_000
  const port = new Promise<number>((resolve) => {
    server.listen(0, '127.0.0.1', () => { resolve((server.address() as { port: number }).port) })
  })
  return {
    port,
    deny: (on) => { denying = on },
    hold: (on) => {
      holding = on
      if (!on) for (const res of holds.splice(0)) res.destroy()
    },
    held: () => heldCalls,
    received: (path) => received.get(path) ?? 0,
    close: () => { server.closeAllConnections(); server.close() }
  }
}

export interface LoadOutcome {
  load: string
  callers: number
  /** Callers given a status line ((a): requests answered). */
  answered: number
  /** Status classes of the answers ((a): 2xx and non-2xx). */
  classes: Record<string, number>
  /** Callers without a status line, by error code ((a): wrk's socket errors). */
  errors: Record<string, number>
  /** Status codes, for (b), (c) and (d). */
  statuses: Record<string, number>
  note: string
}

const count = (map: Record<string, number>, key: string, n = 1): void => { map[key] = (map[key] ?? 0) + n }
export const classOf = (status: number): string => `${Math.floor(status / 100)}xx`

/** N callers at once, each on its own connection; every answer's status or error recorded. */
async function burst (origin: string, n: number, request: Parameters<Pool['request']>[0] | (() => Parameters<Pool['request']>[0])): Promise<Pick<LoadOutcome, 'answered' | 'classes' | 'errors' | 'statuses'>> {
  const pool = new Pool(origin, { connections: n, pipelining: 1, headersTimeout: CALLER_LIMIT_MS, bodyTimeout: CALLER_LIMIT_MS })
  const classes: Record<string, number> = {}
  const statuses: Record<string, number> = {}
  const errors: Record<string, number> = {}
  let answered = 0
  await Promise.all(Array.from({ length: n }, async () => {
    try {
      const res = await pool.request(typeof request === 'function' ? request() : request)
      answered += 1
      count(classes, classOf(res.statusCode))
      count(statuses, String(res.statusCode))
      await res.body.dump().catch(() => {})
    } catch (err) {
      count(errors, (err as { code?: string }).code ?? String(err))
    }
  }))
  await pool.destroy()
  return { answered, classes, errors, statuses }
}

/** A body of `bytes` in 64 KiB chunks; as a Readable, undici writes it as the connection takes it. */
async function * streamedBody (bytes: number): AsyncGenerator<Buffer> {
  for (let sent = 0; sent < bytes; sent += STREAM_CHUNK.length) yield STREAM_CHUNK.subarray(0, Math.min(STREAM_CHUNK.length, bytes - sent))
}

/** wrk's summary: requests, non-2xx/3xx, socket errors. */
export function parseWrk (out: string): { requests: number, non2xx: number, socketErrors: number, detail: string } {
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN)
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  const socketErrors = socket === null ? 0 : socket.slice(1).reduce((sum, v) => sum + Number(v), 0)
  return { requests, non2xx, socketErrors, detail: socket?.[0] ?? 'no socket errors' }
}

export interface SlowlorisOutcome {
  opened: number
  closedBySidecar: number
  statusLines: Record<string, number>
  connectErrors: Record<string, number>
}

/** Slowloris: connections that send a request's head one header line a second, never ending it. */
export async function slowloris (port: number, n: number, holdMs: number): Promise<SlowlorisOutcome> {
  const sockets: Socket[] = []
  const statusLines: Record<string, number> = {}
  const connectErrors: Record<string, number> = {}
  let opened = 0
  let closedBySidecar = 0
  let ending = false
  await Promise.all(Array.from({ length: n }, async () => await new Promise<void>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let head = ''
    socket.once('connect', () => {
      opened += 1
      sockets.push(socket)
      socket.write(`GET ${SMALL_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n`)
      resolve()
    })
    socket.on('data', (chunk: Buffer) => {
      if (head === '') {
        head = chunk.toString('latin1').split('\r\n')[0] ?? ''
        count(statusLines, head.split(' ')[1] ?? head)
      }
    })
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (!sockets.includes(socket)) { count(connectErrors, err.code ?? String(err)); resolve() }
    })
    socket.on('close', () => { if (!ending && sockets.includes(socket)) closedBySidecar += 1 })
  })))
  const until = Date.now() + holdMs
  for (let line = 0; Date.now() < until; line++) {
    await sleep(Math.min(1000, Math.max(0, until - Date.now())))
    for (const socket of sockets) if (!socket.destroyed) socket.write(`X-Slow-${line}: 1\r\n`)
  }
  ending = true
  for (const socket of sockets) socket.destroy()
  return { opened, closedBySidecar, statusLines, connectErrors }
}

/** One GET: its status, or why it got none. */
export async function plainCall (origin: string): Promise<string> {
  try {
    const res = await fetch(`${origin}${SMALL_PATH}`, { signal: AbortSignal.timeout(10_000) })
    await res.arrayBuffer()
    return String(res.status)
  } catch (err) {
    return `no answer (${(err as { cause?: { code?: string } }).cause?.code ?? String(err)})`
  }
}

export interface DriveOptions {
  /** The sidecar's proxy listener. */
  port: number
  upstream: LoadUpstream
  sizes: LoadSizes
  /** Runs wrk with these arguments to its end and returns its stdout. */
  runWrk: (args: string[]) => Promise<string>
  /** Wraps each load (the bench measures the cgroup's peak around it). */
  measure?: (load: string, run: () => Promise<LoadOutcome>) => Promise<LoadOutcome>
  /** Says which load starts. */
  progress?: (load: string) => void
}

/** The four loads one after the other, a pause after each, then a plain call. */
export async function driveFourLoads (o: DriveOptions): Promise<{ outcomes: LoadOutcome[], plain: string }> {
  const { sizes } = o
  const origin = `http://127.0.0.1:${o.port}`
  const outcomes: LoadOutcome[] = []
  const run = async (load: string, fn: () => Promise<Omit<LoadOutcome, 'load'>>): Promise<void> => {
    o.progress?.(load)
    const measure = o.measure ?? (async (_load, go) => await go())
    outcomes.push(await measure(load, async () => ({ load, ...await fn() })))
    await sleep(PAUSE_MS)
  }

  await run(`(a) wrk, 100 keep-alive callers, ${sizes.wrkSeconds} s`, async () => {
    const w = parseWrk(await o.runWrk(['-t2', '-c100', `-d${sizes.wrkSeconds}s`, '--timeout', '10s', `${origin}${SMALL_PATH}`]))
    const classes: Record<string, number> = { '2xx': w.requests - w.non2xx }
    if (w.non2xx > 0) classes['non-2xx'] = w.non2xx
    const errors: Record<string, number> = {}
    if (w.socketErrors > 0) errors.socket = w.socketErrors
    return { callers: w.requests + w.socketErrors, answered: w.requests, classes, errors, statuses: {}, note: w.detail }
  })

  const order = JSON.stringify({ lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 1 }], note: '' })
  const body = order.replace('"note":""', `"note":"${'x'.repeat(POST_BYTES - order.length)}"`)
  await run(`(b) ${sizes.posts} concurrent 60 KB POSTs`, async () => {
    const r = await burst(origin, sizes.posts, { path: '/v2/store/orders', method: 'POST', body, headers: { 'content-type': 'application/json' } })
    return { callers: sizes.posts, ...r, note: JSON.stringify(r.statuses) }
  })

  o.upstream.deny(true)
  await run(`(c) ${sizes.denied} concurrent calls answered 401 + 10 KB`, async () => {
    const r = await burst(origin, sizes.denied, { path: SMALL_PATH, method: 'GET' })
    return { callers: sizes.denied, ...r, note: JSON.stringify(r.statuses) }
  })
  o.upstream.deny(false)

  await run(`(d) ${sizes.slowloris} slowloris connections, ${sizes.slowlorisMs / 1000} s`, async () => {
    const s = await slowloris(o.port, sizes.slowloris, sizes.slowlorisMs)
    const classes: Record<string, number> = {}
    for (const [status, n] of Object.entries(s.statusLines)) count(classes, classOf(Number(status)), n)
    return {
      callers: sizes.slowloris,
      answered: Object.values(s.statusLines).reduce((a, b) => a + b, 0),
      classes,
      errors: s.connectErrors,
      statuses: s.statusLines,
      note: `opened ${s.opened}, closed by the sidecar ${s.closedBySidecar}, status lines ${JSON.stringify(s.statusLines)}`
    }
  })
  const streamed = sizes.streamed ?? 0
  if (streamed > 0) {
    await run(`(e) ${streamed} concurrent POSTs of ${STREAMED_BYTES / 1024 / 1024} MiB, streamed`, async () => {
      const r = await burst(origin, streamed, () => ({
        path: '/v2/store/orders',
        method: 'POST',
        body: Readable.from(streamedBody(STREAMED_BYTES), { objectMode: false }),
        headers: { 'content-type': 'application/octet-stream', 'content-length': String(STREAMED_BYTES) }
      }))
      return { callers: streamed, ...r, note: JSON.stringify(r.statuses) }
    })
  }
  return { outcomes, plain: await plainCall(origin) }
}

/**
 * What failed of the promise, or nothing: the sidecar alive after the four loads, (a)
 * entirely 2xx with no socket error, every caller of (b), (c) and (e) given a status line, the
 * plain call after answered 200.
 */
export function failures (outcomes: LoadOutcome[], plain: string, alive: boolean): string[] {
  const found: string[] = []
  if (!alive) found.push('the sidecar died')
  const [a, b, c, , e] = outcomes
  if (a === undefined || Object.keys(a.classes).some((k) => k !== '2xx') || Object.keys(a.errors).length > 0) found.push('(a) was not entirely 2xx')
  if (e !== undefined && e.answered !== e.callers) found.push(`${e.load}: callers without a status line ${JSON.stringify(e.errors)}`)
  for (const r of [b, c]) if (r === undefined || r.answered !== r.callers) found.push(`${r?.load ?? '(b)/(c)'}: callers without a status line ${JSON.stringify(r?.errors ?? {})}`)
  if (plain !== '200') found.push(`the plain call after: ${plain}`)
  return found
}
