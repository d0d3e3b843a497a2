import { once } from 'node:events'
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import type { Duplex, Readable } from 'node:stream'
import { createServer as createTlsServer } from 'node:tls'
import type { Test } from 'tap'

const HOP_BY_HOP = new Set(['proxy-authorization', 'proxy-connection', 'connection', 'keep-alive'])

/** One request as the proxy received it. */
export interface ProxySeen {
  /** CONNECT (a tunnel) or absolute (plain HTTP through the proxy). */
  kind: 'connect' | 'absolute'
  /** host:port of a CONNECT; the absolute URL of a plain request. */
  target: string
  method: string
  /** The Proxy-Authorization header as received, if any. */
  proxyAuthorization: string | undefined
  /** The headers of an absolute-form request, as received (raw names). */
  rawHeaders: string[]
}

/** What the proxy does to the next requests (set at any time; applies to those that arrive after). */
export type ProxyFault =
  | { kind: 'none' }
  /** Answers every request (CONNECT or absolute) with this status and `Connection: close`. */
  | { kind: 'refuse', status: number }
  /** Takes the connection, reads the request, never answers. */
  | { kind: 'silent' }
  /** Relays this many bytes of the target's answer, then resets the caller's connection. */
  | { kind: 'drop', afterBytes: number }

export interface RecordingProxyOptions {
  /** Names the proxy resolves, and only it: name → loopback port (whatever port is asked). Any other name gets 502. */
  hosts: Record<string, number>
  /** `user:password` required in Proxy-Authorization (Basic), else 407. */
  credentials?: string
}

/**
 * A forward proxy on port 0 for the tests: CONNECT tunnels and absolute-form requests,
 * each recorded, to names only it can resolve (`hosts`), with Basic authentication and
 * faults to inject: a refusal with a status (407, 403, 502), silence, a tunnel dropped
 * mid-answer. `down()` gives a port where no proxy listens.
 */
export async function startRecordingProxy (t: Test, { hosts, credentials }: RecordingProxyOptions) {
  const seen: ProxySeen[] = []
  const sockets = new Set<Duplex>()
  let fault: ProxyFault = { kind: 'none' }
  const expected = credentials === undefined ? undefined : `Basic ${Buffer.from(credentials).toString('base64')}`

  /** The loopback port a name stands for, whatever port was asked (443 for https:// URLs). */
  const resolve = (authority: string): { port: number } | undefined => {
    const port = hosts[authority.replace(/:\d+$/, '').toLowerCase()]
    return port === undefined ? undefined : { port }
  }

  /** Answers itself (a refusal, a 407, a 502), or undefined to go on. */
  const refusal = (req: IncomingMessage): number | undefined => {
    if (fault.kind === 'refuse') return fault.status
    if (expected !== undefined && req.headers['proxy-authorization'] !== expected) return 407
    return undefined
  }
  const rawAnswer = (socket: Duplex, status: number): void => {
    const auth = status === 407 ? 'Proxy-Authenticate: Basic realm="egress"\r\n' : ''
    socket.end(`HTTP/1.1 ${status} Refused\r\n${auth}Content-Length: 0\r\nConnection: close\r\n\r\n`)
  }
  /** Copies `from` to `to`, resetting both once `afterBytes` went through (the drop fault). */
  const relay = (from: Readable, to: Duplex, drop: number | undefined): void => {
    let sent = 0
    from.on('data', (chunk: Buffer) => {
      if (drop !== undefined && sent + chunk.length > drop) {
        to.write(chunk.subarray(0, Math.max(0, drop - sent)), () => {
          (to as Socket).resetAndDestroy?.()
          from.destroy()
        })
        sent = drop
        return
      }
      sent += chunk.length
      to.write(chunk)
    })
    from.on('end', () => { to.end() })
    from.on('error', () => { to.destroy() })
  }

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const target = req.url ?? ''
    seen.push({ kind: 'absolute', target, method: req.method ?? '', proxyAuthorization: req.headers['proxy-authorization'], rawHeaders: [...req.rawHeaders] })
    if (fault.kind === 'silent') return
    const status = refusal(req)
    if (status !== undefined) { rawAnswer(req.socket, status); return }
    let url: URL
    try { url = new URL(target) } catch { rawAnswer(req.socket, 400); return }
    const to = resolve(`${url.hostname}:${url.port === '' ? '80' : url.port}`)
    if (to === undefined) { rawAnswer(req.socket, 502); return }
    const headers: string[] = []
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const name = req.rawHeaders[i] ?? ''
      if (!HOP_BY_HOP.has(name.toLowerCase())) headers.push(name, req.rawHeaders[i + 1] ?? '')
    }
    const drop = fault.kind === 'drop' ? fault.afterBytes : undefined
    // One connection per request (agent: false), as the caller's came.
    const out = request({ host: '127.0.0.1', port: to.port, method: req.method, path: url.pathname + url.search, headers, agent: false }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.rawHeaders)
      res.flushHeaders()
      if (drop === undefined) { answer.pipe(res); return }
      relay(answer, res.socket as Socket, drop)
    })
    // An upstream that answered early and closed: its answer still goes back; the rest of the body is dropped.
    out.on('error', () => {
      req.unpipe(out)
      req.resume()
      if (!res.headersSent) req.socket.destroy()
    })
    req.pipe(out)
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.once('close', () => { sockets.delete(socket) })
  })
  server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const target = req.url ?? ''
    seen.push({ kind: 'connect', target, method: 'CONNECT', proxyAuthorization: req.headers['proxy-authorization'], rawHeaders: [...req.rawHeaders] })
    socket.on('error', () => {})
    if (fault.kind === 'silent') return
    const status = refusal(req)
    if (status !== undefined) { rawAnswer(socket, status); return }
    const to = resolve(target)
    if (to === undefined) { rawAnswer(socket, 502); return }
    const drop = fault.kind === 'drop' ? fault.afterBytes : undefined
    const upstream = connect(to.port, '127.0.0.1', () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n')
      if (head.length > 0) upstream.write(head)
      relay(socket, upstream, undefined)
      relay(upstream, socket, drop)
    })
    upstream.on('error', () => { socket.destroy() })
    sockets.add(upstream)
    upstream.once('close', () => { sockets.delete(upstream) })
  })

  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  const close = async (): Promise<void> => {
    for (const socket of sockets) socket.destroy()
    await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  }
  t.teardown(close)

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    /** The proxy URL with `credentials` in it. */
    urlWith: (userinfo: string) => `http://${userinfo}@127.0.0.1:${port}`,
    seen,
    fault: (next: ProxyFault) => { fault = next },
    close
  }
}

export type RecordingProxy = Awaited<ReturnType<typeof startRecordingProxy>>

/** A loopback port where nothing listens (a proxy that is down). */
export async function downPort (): Promise<number> {
  const server = createTcpServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  return port
}

/**
 * TLS in front of a plain-HTTP test server (the recording upstream), with the given
 * certificate: the upstream's behaviours, over HTTPS. Returns the port.
 */
export async function startTlsFront (t: Test, targetPort: number, tls: { key: string, cert: string }): Promise<number> {
  const sockets = new Set<Socket>()
  const server = createTlsServer(tls, (clear) => {
    const plain = connect(targetPort, '127.0.0.1')
    for (const s of [clear, plain]) {
      sockets.add(s)
      s.once('close', () => { sockets.delete(s) })
      s.on('error', () => { clear.destroy(); plain.destroy() })
    }
    clear.pipe(plain).pipe(clear)
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  })
  return (server.address() as AddressInfo).port
}
