// A floor for the benchmark, not a product: the least a Node.js proxy for this workload
// can do. node:http in front, undici's Pool.dispatch() behind (as src/upstream/forward.ts uses it),
// a static Bearer header, hop-by-hop `connection` dropped, the answer written straight
// to the response. No routing, no hooks, no logging, no metrics, no checks of any kind.
//
// run.ts starts it as a target of every run (--no-floors leaves it out).
// It takes the sidecar's variables (UPSTREAM_URL, PORT, ADMIN_PORT) so the harness can
// start it the same way; its admin port answers 200 to anything.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { Pool } from 'undici'

const upstreamUrl = process.env.UPSTREAM_URL ?? 'http://127.0.0.1:8081'
const host = new URL(upstreamUrl).host

function forwardTo (dispatcher: Pool, req: IncomingMessage, res: ServerResponse, body: IncomingMessage | null): void {
  const headers: Record<string, string | string[] | undefined> = { ...req.headers, host, authorization: 'Bearer floor-token' }
  delete headers.connection
  dispatcher.dispatch({ method: req.method ?? 'GET', path: req.url ?? '/', headers, body }, {
    onRequestStart () {},
    onResponseStart (_controller, status, answerHeaders) { res.writeHead(status, answerHeaders) },
    onResponseData (controller, chunk) {
      if (!res.write(chunk)) {
        controller.pause()
        res.once('drain', () => { controller.resume() })
      }
    },
    onResponseEnd () { res.end() },
    onResponseError (_controller, err) { res.destroy(err) }
  })
}

if (process.argv[1]?.endsWith('node-floor.js') === true) {
  const pool = new Pool(upstreamUrl, { connections: 128 })
  createServer((req, res) => {
    forwardTo(pool, req, res, req.method === 'GET' || req.method === 'HEAD' ? null : req)
  }).listen(Number(process.env.PORT ?? 8080), '127.0.0.1')
  createServer((_req, res) => { res.end('ok') }).listen(Number(process.env.ADMIN_PORT ?? 9090), '127.0.0.1')
  process.on('SIGTERM', () => { process.exit(0) })
}
