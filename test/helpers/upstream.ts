import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Test } from 'tap'
import type { AddressInfo } from 'node:net'

export interface Received {
  method: string
  url: string
  headers: IncomingHttpHeaders
  rawHeaders: string[]
  body: Buffer
}

export type Handler = (req: IncomingMessage, res: ServerResponse, received: Received) => void

const echo: Handler = (_req, res, received) => {
  res.setHeader('content-type', 'application/json')
  res.end(JSON.stringify({ method: received.method, url: received.url, bytes: received.body.length }))
}

/**
 * A real HTTP upstream on port 0 that records every request it receives. The
 * handler runs once the request body has been read whole, unless `streaming` is set,
 * in which case it runs at once and reads the body itself.
 */
export async function startUpstream (t: Test, handler: Handler = echo, { streaming = false } = {}) {
  const received: Received[] = []
  let open = 0
  const server: Server = createServer((req, res) => {
    open += 1
    req.once('close', () => { open -= 1 })
    const entry: Received = {
      method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.alloc(0)
    }
    received.push(entry)
    if (streaming) {
      handler(req, res, entry)
      return
    }
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      entry.body = Buffer.concat(chunks)
      handler(req, res, entry)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => { resolve() })
  }))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    received,
    server,
    /** Requests received and not yet over (read whole, or cut off). */
    open: () => open
  }
}

/**
 * An upstream that holds every request until released; `ids()` lists the x-id header
 * of each request in arrival order, so a test can tell which callers' requests were sent.
 */
export async function startStalledUpstream (t: Test) {
  const held: ServerResponse[] = []
  let holding = true
  const upstream = await startUpstream(t, (_req, res) => {
    if (holding) held.push(res)
    else res.end('done')
  })
  return {
    ...upstream,
    ids: () => upstream.received.map((r) => r.headers['x-id']),
    /** Answers the requests held now. */
    release: () => { for (const res of held.splice(0)) res.end('done') },
    /** Answers everything, now and from here on. */
    releaseAll: () => {
      holding = false
      for (const res of held.splice(0)) res.end('done')
    }
  }
}
