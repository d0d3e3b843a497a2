// A stand-in for TI's order endpoint on port 0: it records every order it receives (by its
// Idempotency-Key header, or the body's poNumber) and behaves as the test scripts it, per
// request: an answer, a hold (until released), a cut mid-answer, a hang, a 401 or a 429.
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

export type Behaviour =
  | { kind: 'answer', status?: number, headers?: Record<string, string>, body?: string }
  | { kind: 'hold' }
  | { kind: 'cut' }
  | { kind: 'hang' }
  | { kind: 'status', status: 401 | 429 | 500 }

export interface Order {
  method: string
  url: string
  key: string
  body: Buffer
  /** TI acted on it (anything but its gateway's 401 and 429). */
  placed?: boolean
}

export async function startTi (t: Test) {
  const orders: Order[] = []
  const held: Array<() => void> = []
  const sockets = new Set<Socket>()
  let script: (order: Order) => Behaviour = () => ({ kind: 'answer' })
  let n = 0
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const header = req.headers['idempotency-key']
      let key = typeof header === 'string' ? header.replace(/^"|"$/g, '') : ''
      if (key === '') {
        try { key = String((JSON.parse(body.toString()) as { poNumber?: unknown }).poNumber ?? '') } catch {}
      }
      const order: Order = { method: req.method ?? '', url: req.url ?? '', key, body }
      orders.push(order)
      n += 1
      const behaviour = script(order)
      order.placed = behaviour.kind !== 'status' || behaviour.status === 500
      behave(behaviour, res, n)
    })
  })
  function behave (b: Behaviour, res: ServerResponse, id: number): void {
    switch (b.kind) {
      case 'answer': {
        const body = b.body ?? `{"order":${id}}`
        res.writeHead(b.status ?? 201, { 'content-type': 'application/json', 'x-order-id': String(id), ...b.headers, 'content-length': Buffer.byteLength(body) })
        res.end(body)
        return
      }
      case 'status':
        res.writeHead(b.status, { 'content-type': 'application/json' })
        res.end(`{"fault":${b.status}}`)
        return
      case 'hold':
        held.push(() => { behave({ kind: 'answer' }, res, id) })
        return
      case 'cut':
        res.writeHead(201, { 'content-type': 'application/json', 'content-length': 1000 })
        res.write('{"order":')
        setTimeout(() => { res.socket?.destroy() }, 20)
    }
    // 'hang': never answers.
  }
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket) })
    socket.on('error', () => {})
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const s of sockets) s.destroy()
    server.close(() => { resolve() })
  }))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    orders,
    script (fn: (order: Order) => Behaviour): void { script = fn },
    /** Answers every held order. */
    release (): void { for (const answer of held.splice(0)) answer() },
    held: () => held.length,
    /** Keys TI placed more than once (its gateway's 401s and 429s place nothing). */
    duplicates (): string[] {
      const seen = new Map<string, number>()
      for (const o of orders) if (o.key !== '' && o.placed === true) seen.set(o.key, (seen.get(o.key) ?? 0) + 1)
      return [...seen].filter(([, count]) => count > 1).map(([key]) => key)
    }
  }
}

export interface Reply {
  status: number
  headers: Record<string, string | string[] | undefined>
  rawHeaders: string[]
  body: Buffer
}

/** One POST to the sidecar; rejects when the connection ends without a status line. */
export async function post (base: string, path: string, body: string, headers: Record<string, string> = {}, { timeoutMs = 0 } = {}): Promise<Reply> {
  return await new Promise<Reply>((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, headers: res.headers, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks) }) })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (timeoutMs > 0) req.setTimeout(timeoutMs, () => { req.destroy(new Error('caller timeout')) })
    req.end(body)
  })
}

/** The error code of a sidecar's own answer. */
export function codeOf (reply: Reply): string {
  try {
    return String((JSON.parse(reply.body.toString()) as { error?: unknown }).error ?? '')
  } catch {
    return ''
  }
}
