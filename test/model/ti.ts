// The stand-in TI store API of the whole-path model: a real HTTP server on port 0 that records,
// for every request, its caller's id, its target, when it arrived and when its answer ended
// (performance.now() in this process, monotonic), and the exact bytes it answered. What it
// answers is the test's switch: at once, slowly, 5xx, or 429 with a Retry-After. A 200's body
// names the request it answered, so a cached answer can be traced to the real fetch it came from.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

export const ID_HEADER = 'x-model-id'

export type TiMode =
  | { kind: 'ok' }
  /** Answers 200 after `ms` (over UPSTREAM_TIMEOUT_MS: the sidecar times the fetch out). */
  | { kind: 'slow', ms: number }
  | { kind: '5xx' }
  | { kind: '429', retryAfterS: number }

export interface TiRecord {
  id: string
  /** Path and query as received. */
  target: string
  at: number
  /** When the answer was written whole, or the connection closed unanswered; undefined while in flight. */
  endAt: number | undefined
  status: number | undefined
  body: string
}

/** Every 200 is this big: a few cache entries are what fills an evicting Redis. */
const PAD_BYTES = 24 * 1024

export async function startTi (t: Pick<Test, 'teardown'>, { latencyMs = 0 } = {}) {
  let mode: TiMode = { kind: 'ok' }
  const records: TiRecord[] = []
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()

  const answer = (res: ServerResponse, record: TiRecord, status: number, headers: Record<string, string>, body: string): void => {
    if (res.destroyed) return
    record.status = status
    record.body = body
    res.writeHead(status, { 'content-type': 'application/json', ...headers })
    res.end(body, () => { record.endAt = performance.now() })
  }
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const record: TiRecord = { id: String(req.headers[ID_HEADER] ?? ''), target: req.url ?? '', at: performance.now(), endAt: undefined, status: undefined, body: '' }
    records.push(record)
    res.on('close', () => { record.endAt ??= performance.now() })
    req.resume()
    const now = mode
    const later = (ms: number, fn: () => void): void => {
      const timer = setTimeout(() => { timers.delete(timer); fn() }, ms)
      timers.add(timer)
    }
    const ok = (): void => { answer(res, record, 200, {}, JSON.stringify({ fetch: record.id, target: record.target, pad: 'x'.repeat(PAD_BYTES) })) }
    switch (now.kind) {
      case 'ok': later(latencyMs, ok); return
      case 'slow': later(now.ms, ok); return
      case '5xx': later(latencyMs, () => { answer(res, record, 503, {}, '{"fault":{"faultstring":"The Service is temporarily unavailable"}}') }); return
      case '429': later(latencyMs, () => { answer(res, record, 429, { 'retry-after': String(now.retryAfterS) }, '{"fault":{"faultstring":"Rate limit quota violation"}}') })
    }
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket) })
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const timer of timers) clearTimeout(timer)
    for (const socket of sockets) socket.destroy()
    server.close(() => { resolve() })
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    records,
    get mode (): TiMode { return mode },
    setMode: (next: TiMode) => { mode = next }
  }
}

export type Ti = Awaited<ReturnType<typeof startTi>>
