import { request as httpRequest, type ClientRequest } from 'node:http'

/** Where a caller gives up, if it does. */
export type Abort =
  | { at: 'midBody', afterBytes: number }
  | { at: 'waiting', afterMs: number }
  | { at: 'midAnswer' }

/** One request exactly as a caller sends it: header names, case and duplicates, framing and body pieces. */
export interface CallerRequest {
  method: string
  /** Path and query, as they go on the request line. */
  target: string
  headers: Array<[string, string | string[]]>
  body: Buffer
  /** `length`: Content-Length; `chunked`: Transfer-Encoding: chunked; `none`: no framing header (no body). */
  framing: 'none' | 'length' | 'chunked'
  /** The body is written in pieces that end at these offsets (each piece is a chunk when chunked). */
  cuts: number[]
  /** Send `Expect: 100-continue` and the body only after `100 Continue`. */
  expectContinue: boolean
  abort: Abort | null
}

/** What the caller saw. */
export interface CallerResult {
  /** The final status line's code, when one arrived. */
  status: number | undefined
  interim: number[]
  rawHeaders: string[]
  body: Buffer
  /** The answer's framing ended cleanly. */
  complete: boolean
  /** The caller gave up itself (its planned abort happened). */
  aborted: boolean
  /** The whole request was handed to the socket. */
  requestSent: boolean
  /** The connection to the sidecar was established (before any planned abort happened). */
  connected: boolean
  /** The final answer's head arrived while the request was still being sent (an early answer). */
  answeredMidUpload: boolean
  error: string | undefined
  elapsedMs: number
}

/**
 * Sends one request over its own connection (node:http with no agent, so nothing is
 * pooled or retried) and reports what came back, or where the caller gave up.
 * Never rejects: a failure is part of the result.
 */
export async function call (baseUrl: string, spec: CallerRequest, { timeoutMs = 15_000, host }: { timeoutMs?: number, host?: string } = {}): Promise<CallerResult> {
  const { hostname, port } = new URL(baseUrl)
  const started = performance.now()
  return await new Promise((resolve) => {
    const result: CallerResult = {
      status: undefined, interim: [], rawHeaders: [], body: Buffer.alloc(0), complete: false, aborted: false, requestSent: false, connected: false, answeredMidUpload: false, error: undefined, elapsedMs: 0
    }
    const chunks: Buffer[] = []
    let settled = false
    const settle = (): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      result.body = Buffer.concat(chunks)
      result.elapsedMs = performance.now() - started
      resolve(result)
    }
    const timer = setTimeout(() => {
      result.error = result.error ?? 'the test caller timed out'
      req.destroy()
      settle()
    }, timeoutMs)
    const abortNow = (): void => {
      if (settled) return
      result.aborted = true
      // Settled once the connection is closed on this side; what the sidecar and the
      // upstream make of it, the test waits for on their state (never on time).
      if (req.closed) settle()
      else req.once('close', settle)
      req.destroy()
    }
    // Every planned abort is armed only once the connection exists and what it follows
    // has been handed to the socket: armed earlier, on a loaded machine the abort can
    // run before the connection is made and the sidecar sees no request at all.
    let connected = false
    const onConnect: Array<() => void> = []
    const whenConnected = (fn: () => void): void => {
      if (connected) fn()
      else onConnect.push(fn)
    }

    const req: ClientRequest = httpRequest({ host: hostname, port: Number(port), method: spec.method, path: spec.target, agent: false, setHost: false })
    req.setHeader('Host', host ?? `${hostname}:${port}`)
    for (const [name, value] of spec.headers) req.setHeader(name, value)
    if (spec.framing === 'length') req.setHeader('Content-Length', String(spec.body.length))
    if (spec.framing === 'chunked') req.setHeader('Transfer-Encoding', 'chunked')
    if (spec.expectContinue) req.setHeader('Expect', '100-continue')

    req.on('information', (info) => { result.interim.push(info.statusCode) })
    req.on('finish', () => { result.requestSent = true })
    req.once('socket', (socket) => {
      const done = (): void => {
        connected = true
        if (!result.aborted) result.connected = true
        for (const fn of onConnect.splice(0)) fn()
      }
      if (!socket.connecting) done()
      else socket.once('connect', done)
    })
    req.on('error', (err) => {
      result.error = result.error ?? (err as NodeJS.ErrnoException).code ?? err.message
      if (result.status === undefined && !result.aborted) settle()
    })
    req.on('response', (res) => {
      result.status = res.statusCode
      result.answeredMidUpload = !result.requestSent
      result.rawHeaders = res.rawHeaders
      if (spec.abort?.at === 'midAnswer') {
        res.pause()
        abortNow()
        return
      }
      res.on('data', (c: Buffer) => { chunks.push(c) })
      res.on('end', () => { result.complete = res.complete })
      res.on('error', (err) => { result.error = result.error ?? err.message })
      res.on('close', settle)
    })

    const pieces: Buffer[] = []
    let from = 0
    for (const cut of [...spec.cuts.filter((c) => c > 0 && c < spec.body.length).sort((a, b) => a - b), spec.body.length]) {
      if (cut > from) pieces.push(spec.body.subarray(from, cut))
      from = Math.max(from, cut)
    }
    const sendBody = (): void => {
      // A caller that gives up mid-upload has sent its head: the sidecar saw a request.
      if (spec.abort?.at === 'midBody') req.flushHeaders()
      let written = 0
      for (const piece of pieces) {
        if (spec.abort?.at === 'midBody' && written + piece.length > spec.abort.afterBytes) {
          const part = piece.subarray(0, spec.abort.afterBytes - written)
          abortAfterWritten(part)
          return
        }
        req.write(piece)
        written += piece.length
      }
      if (spec.abort?.at === 'midBody') {
        abortAfterWritten(Buffer.alloc(0))
        return
      }
      req.end()
      if (spec.abort?.at === 'waiting') {
        const { afterMs } = spec.abort
        // From the moment the whole request is with the operating system, not from the call.
        req.once('finish', () => { setTimeout(() => { if (result.status === undefined) abortNow() }, afterMs) })
      }
    }
    // Gives up mid-upload once the bytes written so far have left (the write's callback,
    // or the connection, when nothing more is written), then a moment for the sidecar to
    // start forwarding them, so the abort lands mid-upload rather than before it.
    const abortAfterWritten = (part: Buffer): void => {
      const arm = (): void => { setTimeout(abortNow, 30) }
      if (part.length > 0) req.write(part, arm)
      else whenConnected(arm)
    }
    if (spec.expectContinue) {
      req.flushHeaders()
      req.once('continue', sendBody)
    } else {
      sendBody()
    }
  })
}

/** Header names in a raw list, lower-cased, to values in order. */
export function headerMap (rawHeaders: string[]): Map<string, string[]> {
  const map = new Map<string, string[]>()
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = (rawHeaders[i] ?? '').toLowerCase()
    const list = map.get(name) ?? []
    list.push(rawHeaders[i + 1] ?? '')
    map.set(name, list)
  }
  return map
}

/**
 * Hop-by-hop headers (RFC 9110 §7.6.1) plus those the README says the sidecar
 * drops, and every header a Connection header names: what may differ in transit.
 */
export const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'proxy-authorization', 'proxy-authenticate', 'expect']

/**
 * A raw header list as its meaning: lower-case names, each name's values joined with
 * ", " in order (RFC 9110 §5.3: the same field either way), without hop-by-hop
 * headers and without the names in `omit`. Sorted, so it compares as a whole.
 */
export function endToEnd (rawHeaders: string[], omit: string[] = []): Array<[string, string]> {
  const map = headerMap(rawHeaders)
  const named = (map.get('connection') ?? []).join(',').split(',').map((s) => s.trim().toLowerCase()).filter((s) => s !== '')
  const drop = new Set([...HOP_BY_HOP, ...named, ...omit])
  return [...map.entries()].filter(([name]) => !drop.has(name))
    .map(([name, values]): [string, string] => [name, values.map((v) => v.trim()).join(', ')])
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
}
