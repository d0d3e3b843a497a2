// A hostile schedule: waves of peers of several kinds, at once and at offsets, against both
// listeners of one sidecar (test/overload/hostile-peers.test.ts generates them), each wave a
// holdFlood of floods.ts, /livez polled throughout as in the floods; and what each kind of peer
// is owed: a final status line (a 1xx is not one) for every whole head, an answer or a close
// within the listener's header timeout for an unfinished one, only these statuses, and nothing
// upstream that should not get there.
import { FLOOD_BOUNDS, holdFlood, LIVENESS_PERIOD_MS, LIVEZ_WITHIN_MS, tinyFields, watchLivez, type FloodBounds, type HeldFlood, type LivezOutcome, type Peer } from './floods.js'
import { plainCall, type LoadUpstream } from './four-loads.js'

/** The MAX_BODY_BYTES the schedules are run with (the sidecar's default is no limit). */
export const HOSTILE_MAX_BODY_BYTES = 256 * 1024
/** An upload within it: the four loads' POST. */
const UPLOAD_BYTES = 60 * 1024
/** One over it announces this and sends only what its kind sends before an answer. */
const OVER_BYTES = 1024 * 1024
/** A slow upload sends its body in this many pieces, one every SLOW_EVERY_MS. */
const SLOW_PIECES = 8
const SLOW_EVERY_MS = 250
/** A slow head sends a piece every second until it is answered: more than the header timeout. */
const HEAD_DRIPS = 30
/** After the waves: their closes reach the sidecar, the upstream's counts settle. */
const PAUSE_MS = 1000

export type Wave = { size: number, startMs: number } & (
  /** Unfinished heads growing by `pieceBytes` of one header value a second. */
  | { kind: 'slow-bytes', startBytes: number, pieceBytes: number }
  /** Unfinished heads growing by `linesPerTick` tiny header lines a second. */
  | { kind: 'slow-lines', startLines: number, linesPerTick: number }
  /** Whole requests of `fields` tiny header lines: over MAX_HEADER_COUNT. */
  | { kind: 'heavy', fields: number }
  /** A whole GET, then the keep-alive connection held idle until `holdMs` after the wave's start. */
  | { kind: 'idle', holdMs: number }
  /** Unfinished heads on the admin port. */
  | { kind: 'admin' }
  /** POSTs, with `Expect: 100-continue` or not, over HOSTILE_MAX_BODY_BYTES or not, slow or not. */
  | { kind: 'upload', expect: boolean, over: boolean, slow: boolean }
)

interface Owed {
  admin: boolean
  /** The final statuses it may get. */
  statuses: string[]
  /** A whole head: owed a final status, never a close without one. */
  whole: boolean
  /** Its requests may reach the upstream. */
  upstream: boolean
  /** No 1xx may come (a body that would be refused is never invited). */
  noContinue: boolean
  /** Beyond the listener's bound: the time its peer takes to send. */
  sendingMs: number
}

const pad = (n: number, c: string): string => c.repeat(Math.max(0, n))

/** What a wave's kind is owed. */
export function owed (wave: Wave): Owed {
  const unfinished = { admin: false, statuses: ['408', '431', '503'], whole: false, upstream: false, noContinue: true, sendingMs: 0 }
  switch (wave.kind) {
    case 'slow-bytes': case 'slow-lines': return unfinished
    case 'admin': return { ...unfinished, admin: true, statuses: ['408', '503'] }
    case 'heavy': return { ...unfinished, statuses: ['431', '503'], whole: true }
    case 'idle': return { ...unfinished, statuses: ['200', '503'], whole: true, upstream: true, noContinue: false }
    case 'upload': return {
      admin: false,
      statuses: wave.over ? ['413', '503'] : ['200', '503'],
      whole: true,
      upstream: !wave.over,
      noContinue: wave.over || !wave.expect,
      sendingMs: wave.slow ? SLOW_PIECES * SLOW_EVERY_MS : 0
    }
  }
}

/** How each connection of the wave behaves; `path` tells its requests apart upstream. */
export function peerOf (wave: Wave, path: string): Peer {
  const line = `${wave.kind === 'admin' ? 'GET /livez' : `${wave.kind === 'upload' ? 'POST' : 'GET'} ${path}`} HTTP/1.1\r\nHost: 127.0.0.1\r\n`
  switch (wave.kind) {
    case 'slow-bytes': return { opening: `${line}X-Pad: ${pad(wave.startBytes, 'a')}`, dribble: { piece: pad(wave.pieceBytes, 'a'), everyMs: 1000, times: HEAD_DRIPS } }
    case 'slow-lines': return { opening: line + tinyFields(wave.startLines), dribble: { piece: 'z:1\r\n'.repeat(wave.linesPerTick), everyMs: 1000, times: HEAD_DRIPS } }
    case 'heavy': return { opening: `${line}${tinyFields(wave.fields)}\r\n` }
    case 'idle': return { opening: `${line}\r\n`, holdMs: wave.holdMs }
    case 'admin': return { opening: line }
    case 'upload': {
      const length = wave.over ? OVER_BYTES : UPLOAD_BYTES
      const head = `${line}Content-Type: application/octet-stream\r\nContent-Length: ${length}\r\n${wave.expect ? 'Expect: 100-continue\r\n' : ''}\r\n`
      // Slow: a piece every SLOW_EVERY_MS after the first; one over the limit never ends its body.
      const piece = wave.slow ? Math.floor(UPLOAD_BYTES / (SLOW_PIECES + 1)) : 0
      const first = pad(wave.over ? 64 * 1024 : UPLOAD_BYTES - SLOW_PIECES * piece, 'u')
      const dribble = wave.slow ? { piece: pad(piece, 'u'), everyMs: SLOW_EVERY_MS, times: SLOW_PIECES } : undefined
      return { ...(wave.expect ? { opening: head, onContinue: first } : { opening: head + first }), ...(dribble === undefined ? {} : { dribble }) }
    }
  }
}

export interface WaveOutcome extends HeldFlood {
  wave: Wave
  path: string
  /** Its requests the upstream received. */
  reachedUpstream: number
}

export interface ScheduleOutcome {
  waves: WaveOutcome[]
  livez: LivezOutcome
  /** A plain call after the waves. */
  plain: string
  /** From the first wave's start to the last one's end. */
  ms: number
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** The waves at once (each from its offset), /livez polled throughout, then a plain call. `tag` tells this schedule's requests apart upstream. */
export async function driveSchedule (o: { port: number, adminPort: number, upstream: LoadUpstream, tag: string }, schedule: Wave[]): Promise<ScheduleOutcome> {
  const livez = watchLivez(o.adminPort)
  await livez.first
  const started = performance.now()
  const floods = await Promise.all(schedule.map(async (wave, i) => {
    await sleep(wave.startMs)
    const path = `/v2/store/hostile/${o.tag}-${i}-${wave.kind}`
    const { admin, sendingMs } = owed(wave)
    const listener: FloodBounds = admin ? FLOOD_BOUNDS.admin : FLOOD_BOUNDS.proxy
    const flood = await holdFlood(admin ? o.adminPort : o.port, wave.size, peerOf(wave, path), { ...listener, answerWithinMs: listener.answerWithinMs + sendingMs })
    return { wave, path, ...flood }
  }))
  const ms = Math.round(performance.now() - started)
  const polled = await livez.stop()
  await sleep(PAUSE_MS)
  const waves = floods.map((flood) => ({ ...flood, reachedUpstream: o.upstream.received(flood.path) }))
  return { waves, livez: polled, plain: await plainCall(`http://127.0.0.1:${o.port}`), ms }
}

/** One line for a wave: what it was and what it got. */
export function waveNote (w: WaveOutcome): string {
  const { kind, size, startMs, ...shape } = w.wave
  return `${kind} ${size} at ${startMs} ms ${JSON.stringify(shape)}: opened ${w.opened}, ${JSON.stringify(w.statusLines)}` +
    `${w.informational > 0 ? `, 1xx ${w.informational}` : ''}, closed without one ${w.closedSilently}, hung ${w.hung}, ` +
    `never accepted ${w.notAccepted}, slowest ${w.slowestMs} ms, upstream ${w.reachedUpstream}` +
    (Object.keys(w.connectErrors).length > 0 ? `, not opened ${JSON.stringify(w.connectErrors)}` : '')
}

/** What failed of the promise, or nothing. */
export function scheduleFailures (s: ScheduleOutcome, alive: boolean): string[] {
  const found: string[] = []
  if (!alive) found.push('the sidecar died')
  if (s.livez.polls === 0 || s.livez.longestFailingMs >= LIVENESS_PERIOD_MS) {
    found.push(`/livez failing for ${s.livez.longestFailingMs} ms (${s.livez.ok} / ${s.livez.polls} 200 within ${LIVEZ_WITHIN_MS} ms, ${JSON.stringify(s.livez.failures)})`)
  }
  for (const w of s.waves) {
    const o = owed(w.wave)
    const problems: string[] = []
    if (w.opened !== w.connections) problems.push('not every connection opened')
    if (w.hung > 0) problems.push(`${w.hung} neither answered nor closed within the bound`)
    if (o.whole && w.closedSilently > 0) problems.push(`${w.closedSilently} whole heads closed without a final status`)
    const other = Object.keys(w.statusLines).filter((status) => !o.statuses.includes(status))
    if (other.length > 0) problems.push(`statuses ${other.join(', ')} (owed one of ${o.statuses.join(', ')})`)
    if (o.noContinue && w.informational > 0) problems.push(`${w.informational} got a 1xx`)
    if (!o.upstream && w.reachedUpstream > 0) problems.push(`${w.reachedUpstream} reached the upstream`)
    if (o.upstream && (w.reachedUpstream > w.opened || w.reachedUpstream < (w.statusLines['200'] ?? 0))) problems.push(`${w.reachedUpstream} reached the upstream for ${w.statusLines['200'] ?? 0} answered 200`)
    if (problems.length > 0) found.push(`${waveNote(w)}: ${problems.join('; ')}`)
  }
  if (s.plain !== '200') found.push(`the plain call after: ${s.plain}`)
  return found
}
