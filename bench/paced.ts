// Fixed-rate load generator, in its own process: requests are sent on an even
// schedule (request i at start + i / rate), whether or not earlier ones have been
// answered (open loop, as wrk2 does), over keep-alive connections opened as needed.
//
// Latency is measured two ways:
//   service  from the moment the request is written to the end of the answer;
//   intended from the moment the schedule said to send it (wrk2's correction
//            for coordinated omission: a target that stalls is charged for the
//            requests that queued behind the stall).
// The send lag (actual − intended) shows whether the generator kept its pace.
//
//   node dist/bench/paced.js '{"url":"http://127.0.0.1:8080/x","rate":1000,"durationS":10,"warmupS":1,"headers":{}}'
//   prints one JSON line with the results.
import { connect, type Socket } from 'node:net'
import { percentile } from './lib/stats.js'

interface Options {
  url: string
  rate: number
  durationS: number
  warmupS: number
  headers: Record<string, string>
  maxConnections?: number
}

const options = JSON.parse(process.argv[2] ?? '{}') as Options
const { url, rate, durationS, warmupS, headers, maxConnections = 64 } = options
const intervalMs = 1000 / rate
const warmup = Math.round(rate * warmupS)
const total = warmup + Math.round(rate * durationS)
const HARD_LIMIT_MS = (warmupS + durationS) * 1000 + 15_000

// A minimal keep-alive HTTP/1.1 client on node:net, so that the generator's own
// cost (and garbage) stays small next to what it measures: one prebuilt request,
// answers read until their Content-Length (or the last chunk) is in.
const target = new URL(url)
const REQUEST = Buffer.from(`GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\n` +
  Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n')
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i
const CHUNKED = /\r\ntransfer-encoding:[^\r]*chunked/i
const LAST_CHUNK = Buffer.from('0\r\n\r\n')

interface Connection {
  socket: Socket
  index: number
  at: number
  intended: number
  received: Buffer | undefined
}

const idle: Connection[] = []
let open = 0
const backlog: Array<[number, number]> = []

const service = new Float64Array(total).fill(NaN)
const corrected = new Float64Array(total).fill(NaN)
const lag = new Float64Array(total).fill(NaN)
let done = 0
let errors = 0
let non2xx = 0
let sent = 0
const start = performance.now() + 20

function openConnection (): Connection {
  const socket = connect(Number(target.port), target.hostname)
  socket.setNoDelay(true)
  const conn: Connection = { socket, index: -1, at: 0, intended: 0, received: undefined }
  open++
  socket.on('data', (chunk: Buffer) => { onData(conn, chunk) })
  socket.on('error', () => {})
  socket.on('close', () => {
    open--
    const i = idle.indexOf(conn)
    if (i !== -1) idle.splice(i, 1)
    if (conn.index !== -1) { errors++; conn.index = -1; finish() }
  })
  return conn
}

function onData (conn: Connection, chunk: Buffer): void {
  const buf = conn.received === undefined ? chunk : Buffer.concat([conn.received, chunk])
  const headEnd = buf.indexOf('\r\n\r\n')
  if (headEnd === -1) { conn.received = buf; return }
  const head = buf.toString('latin1', 0, headEnd + 2)
  const length = CONTENT_LENGTH.exec(head)
  const complete = length?.[1] !== undefined
    ? buf.length >= headEnd + 4 + Number(length[1])
    : CHUNKED.test(head) ? buf.subarray(buf.length - LAST_CHUNK.length).equals(LAST_CHUNK) : true
  if (!complete) { conn.received = buf; return }
  conn.received = undefined
  const end = performance.now()
  const i = conn.index
  conn.index = -1
  service[i] = end - conn.at
  corrected[i] = end - conn.intended
  if (head.charCodeAt(9) !== 50 /* 2xx */) non2xx++
  finish()
  const next = backlog.shift()
  if (next !== undefined) write(conn, next[0], next[1])
  else idle.push(conn)
}

function write (conn: Connection, i: number, intended: number): void {
  conn.index = i
  conn.intended = intended
  conn.at = performance.now()
  lag[i] = conn.at - intended
  conn.socket.write(REQUEST)
}

function send (i: number, intended: number): void {
  const conn = idle.pop() ?? (open < maxConnections ? openConnection() : undefined)
  // Every connection busy: the request waits for one, and its intended latency shows it.
  if (conn === undefined) backlog.push([i, intended])
  else write(conn, i, intended)
}

function finish (): void {
  done++
  if (done === total) report()
}

function tick (): void {
  const now = performance.now()
  while (sent < total && start + sent * intervalMs <= now) {
    send(sent, start + sent * intervalMs)
    sent++
  }
  if (sent < total) setTimeout(tick, Math.max(0, start + sent * intervalMs - performance.now()))
}

function summary (values: Float64Array): Record<string, number> {
  const measured = values.subarray(warmup).filter((v) => !Number.isNaN(v)).sort()
  return {
    p50: percentile(measured, 50),
    p90: percentile(measured, 90),
    p99: percentile(measured, 99),
    p999: percentile(measured, 99.9),
    max: percentile(measured, 100)
  }
}

let reported = false
function report (): void {
  if (reported) return
  reported = true
  const measured = service.subarray(warmup).filter((v) => !Number.isNaN(v))
  const firstMeasured = start + warmup * intervalMs
  process.stdout.write(JSON.stringify({
    requests: measured.length,
    expected: total - warmup,
    errors,
    non2xx,
    achievedRate: measured.length / ((performance.now() - firstMeasured) / 1000),
    serviceMs: summary(service),
    intendedMs: summary(corrected),
    sendLagMs: summary(lag)
  }) + '\n')
  for (const conn of idle) conn.socket.destroy()
  process.exit(0)
}

setTimeout(() => { errors += total - done; report() }, HARD_LIMIT_MS).unref()
setTimeout(tick, 20)
