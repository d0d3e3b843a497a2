// Two floods every listener must hold inside its memory limit, each against the sidecar as
// the four loads find it (four-loads.ts; the bench runs them after those, the test
// test/overload/cgroup-floods.test.ts on a fresh sidecar):
//   (e) ADMIN_HEADS connections to the admin port, each sending an unfinished head and holding it;
//   (f) HEAVY_HEADS connections to the proxy port, each sending an unfinished head of
//       TINY_FIELDS tiny header lines (`a1:b`, ~6.5 KB) and holding it;
//   (f') as many whole requests of TINY_FIELDS fields, the upstream holding whatever reaches it:
//       each is owed 431 (over MAX_HEADER_COUNT) and none may reach the upstream.
// Throughout each flood a separate process calls /livez every LIVEZ_EVERY_MS on a new
// connection, as the kubelet does, and records each answer's latency: it must be 200 within
// LIVEZ_WITHIN_MS. Every connection a flood opened must get a status line or a close within
// the caller's bound (the listener's header timeout and slack), never hang; then a plain call
// is answered 200.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { plainCall, SMALL_PATH, type LoadOutcome, type LoadUpstream } from './four-loads.js'

export interface FloodSizes {
  /** (e): unfinished heads on the admin port. */
  adminHeads: number
  /** (f) and (f'): connections with a head of `fields` tiny header lines on the proxy port. */
  heavyHeads: number
  fields: number
}

/** The floods as the issue measured them. */
export const FULL_FLOODS: FloodSizes = { adminHeads: 12_000, heavyHeads: 2_000, fields: 930 }

/** The kubelet's probe answered within this, or it counts as failed (the chart's timeoutSeconds). */
export const LIVEZ_WITHIN_MS = 2000
/**
 * The chart's liveness periodSeconds: failed polls spanning less than this fail at most one
 * probe in a row, and the kubelet restarts a pod only after three (failureThreshold).
 */
export const LIVENESS_PERIOD_MS = 10_000
const LIVEZ_EVERY_MS = 100
/** A /livez poll without an answer after this is recorded as such. */
const LIVEZ_GIVE_UP_MS = 5000
/** Between two floods: the last one's sockets close and the sidecar settles. */
const PAUSE_MS = 1000

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
const count = (map: Record<string, number>, key: string, n = 1): void => { map[key] = (map[key] ?? 0) + n }

/** `fields` tiny header lines, `a<i>:b`: ~6.5 KB for 930. */
export const tinyFields = (fields: number): string => Array.from({ length: fields }, (_, i) => `a${i}:b\r\n`).join('')

export interface LivezOutcome {
  polls: number
  /** Answered 200 within LIVEZ_WITHIN_MS. */
  ok: number
  /** Every other poll: its status or error, `200 late` for a 200 after LIVEZ_WITHIN_MS. */
  failures: Record<string, number>
  worstMs: number
  /** Of the worst poll: how long its connection took to open (a SYN dropped on a full accept queue is retried after 1 s). */
  worstConnectMs: number
  /** The longest run of failed polls, from the first one's start to the last one's end (ms). */
  longestFailingMs: number
}

/**
 * The poller: a process of its own, so the flood's own event loop never delays a poll's
 * clock. One poll at a time, each on a new connection; a JSON line per poll on stdout.
 */
const POLLER = `
const net = require('node:net')
const [port, every, giveUp] = process.argv.slice(1).map(Number)
const origin = performance.now()
let stopping = false
process.stdin.on('end', () => { stopping = true }).resume()
const poll = () => new Promise((resolve) => {
  const started = performance.now()
  const since = () => Math.round((performance.now() - started) * 10) / 10
  let done = false
  let connectMs = -1
  const finish = (status) => {
    if (done) return
    done = true
    clearTimeout(timer)
    socket.destroy()
    process.stdout.write(JSON.stringify({ at: Math.round(started - origin), ms: since(), connectMs, status }) + '\\n')
    resolve()
  }
  const timer = setTimeout(() => finish('no answer in ' + giveUp + ' ms'), giveUp)
  const socket = net.connect(port, '127.0.0.1', () => {
    connectMs = since()
    socket.write('GET /livez HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n')
  })
  socket.once('data', (chunk) => finish(String(chunk.toString('latin1').split('\\r\\n')[0].split(' ')[1])))
  socket.on('error', (err) => finish(err.code || String(err)))
  socket.on('close', () => finish('closed'))
})
;(async () => {
  while (!stopping) {
    const started = performance.now()
    await poll()
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, every - (performance.now() - started))))
  }
})()
`

/** Polls /livez on `adminPort` until stop(); stop() resolves with every poll's verdict. */
export function watchLivez (adminPort: number): { first: Promise<void>, stop: () => Promise<LivezOutcome> } {
  const child = spawn(process.execPath, ['-e', POLLER, String(adminPort), String(LIVEZ_EVERY_MS), String(LIVEZ_GIVE_UP_MS)], { stdio: ['pipe', 'pipe', 'inherit'] })
  const outcome: LivezOutcome = { polls: 0, ok: 0, failures: {}, worstMs: 0, worstConnectMs: 0, longestFailingMs: 0 }
  let failingSince: number | undefined
  let rest = ''
  let firstPoll: () => void = () => {}
  const first = new Promise<void>((resolve) => { firstPoll = resolve })
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    const lines = (rest + chunk).split('\n')
    rest = lines.pop() ?? ''
    for (const line of lines) {
      const { at, ms, connectMs, status } = JSON.parse(line) as { at: number, ms: number, connectMs: number, status: string }
      outcome.polls += 1
      if (ms >= outcome.worstMs) {
        outcome.worstMs = ms
        outcome.worstConnectMs = connectMs
      }
      if (status === '200' && ms <= LIVEZ_WITHIN_MS) {
        outcome.ok += 1
        failingSince = undefined
      } else {
        count(outcome.failures, status === '200' ? '200 late' : status)
        failingSince ??= at
        outcome.longestFailingMs = Math.max(outcome.longestFailingMs, at + ms - failingSince)
      }
      firstPoll()
    }
  })
  const exited = new Promise((resolve) => child.once('close', resolve))
  // No poll ever answered: the poller's own limit ends the wait.
  child.once('close', firstPoll)
  return {
    first,
    stop: async () => {
      child.stdin.end()
      const timer = setTimeout(() => child.kill('SIGKILL'), 2 * LIVEZ_GIVE_UP_MS)
      await exited
      clearTimeout(timer)
      return outcome
    }
  }
}

export interface HeldFlood {
  connections: number
  /** Connected, the head written. */
  opened: number
  /** The final (not 1xx) status code each connection got. */
  statusLines: Record<string, number>
  /** Connections that got a 1xx (100 Continue) before whatever followed. */
  informational: number
  /** Closed (or reset) by the sidecar before a final status line (a 1xx is not one). */
  closedSilently: number
  /** Opened, accepted by the listener, and neither a final status line nor a close within the bound. */
  hung: number
  /**
   * Opened from this side, but still half-open (SYN_RECV) on the listener's at the bound: its
   * final ACK was dropped on a full accept queue, so the listener never accepted it (the kernel
   * sends its SYN-ACK again at 1, 3, 7, 15, 31 s).
   */
  notAccepted: number
  /** Connections never opened, by error (`still connecting` when the opening phase ended first). */
  connectErrors: Record<string, number>
  /** The longest wait from a connection's opening to its final status line or close, ms. */
  slowestMs: number
  /** From the first connect to the last connection opened (or failed), ms. */
  openingMs: number
}

export interface FloodBounds {
  /** Each opened connection is owed a status line or a close within this of its opening. */
  answerWithinMs: number
  /** Connections still connecting after this (SYN retries on a full accept queue) are given up. */
  connectWithinMs: number
}

/**
 * How each connection of a flood behaves: `opening` written once connected (a head, whole or
 * not, perhaps a body's start), `onContinue` on a `100 Continue`; then, until a final status,
 * `dribble.piece` every `dribble.everyMs`, `times` times (a slow head or body), from the opening,
 * or from the 100 when there is an `onContinue`. Held open `holdMs` at least from the flood's
 * start, answered or not (idle keep-alives).
 */
export interface Peer {
  opening: string
  onContinue?: string
  dribble?: { piece: string, everyMs: number, times: number }
  holdMs?: number
}

/** Beyond a listener's header timeout and the check that enforces it: a busy machine's delay, not a hang. */
export const SLACK_MS = 10_000
const CONNECT_WITHIN_MS = 60_000
/**
 * The bounds for the sidecar's defaults: the admin port's head timeout (5 s, checked every
 * 1 s: src/admin/server.ts) and the proxy port's (HEADERS_TIMEOUT_MS 10 s, checked every 2 s),
 * each plus SLACK_MS. The bench cannot import src/; the test checks these against it.
 */
export const FLOOD_BOUNDS: { admin: FloodBounds, proxy: FloodBounds } = {
  admin: { answerWithinMs: 5_000 + 1_000 + SLACK_MS, connectWithinMs: CONNECT_WITHIN_MS },
  proxy: { answerWithinMs: 10_000 + 2_000 + SLACK_MS, connectWithinMs: CONNECT_WITHIN_MS }
}

/**
 * What a connection got so far: its final status (the first status line not 1xx, or the first
 * line of an answer that is not HTTP), or undefined while it has only 1xx heads or part of a
 * line; and how many whole 1xx heads came before.
 */
export function finalStatus (text: string): { final: string | undefined, informational: number } {
  let informational = 0
  let at = 0
  for (;;) {
    const line = /^HTTP\/1\.[01] (\d{3})/.exec(text.slice(at, at + 16))
    if (line?.[1] === undefined) {
      const end = text.indexOf('\r\n', at)
      return { final: end === -1 ? undefined : text.slice(at, end), informational }
    }
    if (!line[1].startsWith('1')) return { final: line[1], informational }
    const end = text.indexOf('\r\n\r\n', at)
    if (end === -1) return { final: undefined, informational }
    informational += 1
    at = end + 4
  }
}

/**
 * `n` connections at once to `port`, each behaving as `peer` (or writing `peer` once connected
 * and holding it), until every one got a final status line or was closed, or its bound passed.
 */
export async function holdFlood (port: number, n: number, peer: string | Peer, bounds: FloodBounds): Promise<HeldFlood> {
  interface Conn { socket: Socket, openedAt?: number, answeredAt?: number, failed?: boolean, text: string, continued: boolean, drip?: NodeJS.Timeout }
  const { opening, onContinue, dribble, holdMs = 0 } = typeof peer === 'string' ? { opening: peer } : peer
  const conns: Conn[] = []
  const statusLines: Record<string, number> = {}
  const connectErrors: Record<string, number> = {}
  let closedSilently = 0
  let informational = 0
  const started = performance.now()
  let lastSettled = started
  let settled = 0
  let settle: () => void = () => {}
  const allSettled = new Promise<void>((resolve) => { settle = resolve })
  const settledOne = (): void => {
    lastSettled = performance.now()
    if (++settled === n) settle()
  }
  const drip = (conn: Conn, left: number): void => {
    if (dribble === undefined || left <= 0) return
    conn.drip = setTimeout(() => {
      if (conn.answeredAt !== undefined || conn.socket.destroyed) return
      conn.socket.write(dribble.piece)
      drip(conn, left - 1)
    }, dribble.everyMs)
  }
  for (let i = 0; i < n; i++) {
    const conn: Conn = { socket: connect(port, '127.0.0.1'), text: '', continued: false }
    conns.push(conn)
    const { socket } = conn
    socket.once('connect', () => {
      conn.openedAt = performance.now()
      socket.write(opening)
      if (onContinue === undefined) drip(conn, dribble?.times ?? 0)
      settledOne()
    })
    socket.on('data', (chunk: Buffer) => {
      if (conn.answeredAt !== undefined) return
      conn.text += chunk.toString('latin1')
      const seen = finalStatus(conn.text)
      if (seen.informational > 0 && !conn.continued) {
        conn.continued = true
        informational += 1
        if (onContinue !== undefined) {
          socket.write(onContinue)
          drip(conn, dribble?.times ?? 0)
        }
      }
      if (seen.final === undefined) return
      conn.answeredAt = performance.now()
      count(statusLines, seen.final)
    })
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (conn.openedAt !== undefined || conn.failed === true) return
      conn.failed = true
      count(connectErrors, err.code ?? String(err))
      settledOne()
    })
    socket.once('close', () => {
      if (conn.openedAt === undefined || conn.answeredAt !== undefined) return
      conn.answeredAt = performance.now()
      closedSilently += 1
    })
  }
  let giveUp: NodeJS.Timeout | undefined
  await Promise.race([allSettled, new Promise((resolve) => { giveUp = setTimeout(resolve, bounds.connectWithinMs) })])
  clearTimeout(giveUp)
  for (const conn of conns) {
    if (conn.openedAt !== undefined || conn.failed === true) continue
    conn.failed = true
    count(connectErrors, 'still connecting')
    conn.socket.destroy()
  }
  const openingMs = Math.round(lastSettled - started)
  // Until every opened connection was answered or closed, or its bound passed.
  const waiting = (now: number): boolean => conns.some((c) => c.openedAt !== undefined && c.answeredAt === undefined && now - c.openedAt <= bounds.answerWithinMs)
  while (waiting(performance.now())) await sleep(100)
  const halfOpen = halfOpenPeers(port)
  let hung = 0
  let notAccepted = 0
  let slowestMs = 0
  for (const conn of conns) {
    if (conn.openedAt === undefined) continue
    if (conn.answeredAt !== undefined) slowestMs = Math.max(slowestMs, conn.answeredAt - conn.openedAt)
    else if (halfOpen.has(conn.socket.localPort ?? 0)) notAccepted += 1
    else hung += 1
  }
  await sleep(Math.max(0, started + holdMs - performance.now()))
  for (const conn of conns) {
    clearTimeout(conn.drip)
    conn.socket.destroy()
  }
  return {
    connections: n,
    opened: conns.filter((c) => c.openedAt !== undefined).length,
    statusLines,
    informational,
    closedSilently,
    hung,
    notAccepted,
    connectErrors,
    slowestMs: Math.round(slowestMs),
    openingMs
  }
}

/** The client ports of the connections to 127.0.0.1:`port` still half-open on the listener's side (Linux's /proc/net/tcp, SYN_RECV). */
function halfOpenPeers (port: number): Set<number> {
  const peers = new Set<number>()
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`
  try {
    for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n')) {
      const [, from, to, state] = line.trim().split(/\s+/)
      if (from === local && state === '03' && to !== undefined) peers.add(parseInt(to.split(':')[1] ?? '', 16))
    }
  } catch {}
  return peers
}

export interface FloodOutcome extends LoadOutcome, HeldFlood {
  livez: LivezOutcome
  /** (f'): requests that reached the upstream. */
  reachedUpstream: number
}

export interface FloodOptions {
  /** The sidecar's proxy and admin listeners. */
  port: number
  adminPort: number
  upstream: LoadUpstream
  sizes: FloodSizes
  /** The bounds of the admin port's flood, and of the proxy port's. */
  admin: FloodBounds
  proxy: FloodBounds
  /** Wraps each flood (the bench measures the cgroup's peak around it). */
  measure?: (load: string, run: () => Promise<FloodOutcome>) => Promise<FloodOutcome>
  progress?: (load: string) => void
}

/** The three floods one after the other, /livez polled throughout each, a pause after each, then a plain call. */
export async function driveFloods (o: FloodOptions): Promise<{ outcomes: FloodOutcome[], plain: string }> {
  const { sizes } = o
  const outcomes: FloodOutcome[] = []
  const fields = tinyFields(sizes.fields)
  const head = `GET ${SMALL_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n`
  const run = async (load: string, port: number, n: number, bytes: string, bounds: FloodBounds): Promise<void> => {
    o.progress?.(load)
    const measure = o.measure ?? (async (_load, go) => await go())
    outcomes.push(await measure(load, async () => {
      const livez = watchLivez(o.adminPort)
      await livez.first
      const heldBefore = o.upstream.held()
      const flood = await holdFlood(port, n, bytes, bounds)
      const reachedUpstream = o.upstream.held() - heldBefore
      const polled = await livez.stop()
      const answered = Object.values(flood.statusLines).reduce((a, b) => a + b, 0)
      const classes: Record<string, number> = {}
      for (const [status, k] of Object.entries(flood.statusLines)) count(classes, `${status.slice(0, 1)}xx`, k)
      const errors: Record<string, number> = { ...flood.connectErrors }
      if (flood.hung > 0) errors.hung = flood.hung
      const note = `opened ${flood.opened} in ${flood.openingMs} ms, status lines ${JSON.stringify(flood.statusLines)}, ` +
        `closed without one ${flood.closedSilently}, hung ${flood.hung}, never accepted ${flood.notAccepted}, slowest ${flood.slowestMs} ms` +
        (reachedUpstream > 0 ? `, ${reachedUpstream} reached the upstream` : '') +
        `; /livez: ${polled.ok} / ${polled.polls} 200 within ${LIVEZ_WITHIN_MS} ms, worst ${polled.worstMs} ms (connected in ${polled.worstConnectMs})` +
        (Object.keys(polled.failures).length > 0 ? `, failed ${JSON.stringify(polled.failures)}` : '')
      return { load, callers: n, answered, classes, errors, statuses: flood.statusLines, note, ...flood, livez: polled, reachedUpstream }
    }))
    await sleep(PAUSE_MS)
  }

  await run(`(e) ${sizes.adminHeads} unfinished heads on the admin port`, o.adminPort, sizes.adminHeads, 'GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n', o.admin)
  await run(`(f) ${sizes.heavyHeads} unfinished heads of ${sizes.fields} tiny fields`, o.port, sizes.heavyHeads, head + fields, o.proxy)
  o.upstream.hold(true)
  try {
    await run(`(f') ${sizes.heavyHeads} requests of ${sizes.fields} tiny fields, the upstream holding`, o.port, sizes.heavyHeads, `${head}${fields}\r\n`, o.proxy)
  } finally {
    o.upstream.hold(false)
  }
  return { outcomes, plain: await plainCall(`http://127.0.0.1:${o.port}`) }
}

/**
 * What failed of the promise, or nothing: the sidecar alive, /livez never failing (no 200
 * within LIVEZ_WITHIN_MS) for a liveness period, so the kubelet would never restart the pod,
 * every opened connection a status line or a close within its
 * bound, (f') 431 for every request and none upstream, the plain call after answered 200.
 */
export function floodFailures (outcomes: FloodOutcome[], plain: string, alive: boolean): string[] {
  const found: string[] = []
  if (!alive) found.push('the sidecar died')
  for (const o of outcomes) {
    if (o.livez.polls === 0 || o.livez.longestFailingMs >= LIVENESS_PERIOD_MS) {
      found.push(`${o.load}: /livez failing for ${o.livez.longestFailingMs} ms (a liveness probe could fail twice in a row), ${o.livez.ok} / ${o.livez.polls} within ${LIVEZ_WITHIN_MS} ms, worst ${o.livez.worstMs} ms ${JSON.stringify(o.livez.failures)}`)
    }
    if (o.hung > 0) found.push(`${o.load}: ${o.hung} connections hung`)
  }
  const whole = outcomes[2]
  if (whole !== undefined && (whole.statuses['431'] !== whole.opened || whole.reachedUpstream > 0)) {
    found.push(`${whole.load}: not 431 for every request (${JSON.stringify(whole.statuses)}, ${whole.reachedUpstream} upstream)`)
  }
  if (plain !== '200') found.push(`the plain call after: ${plain}`)
  return found
}
