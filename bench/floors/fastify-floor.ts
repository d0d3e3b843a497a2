// A floor for the benchmark, not a product: node-floor.ts behind one Fastify wildcard
// route (no hooks, no logger, bodies passed through unparsed). Against node-floor it
// shows what Fastify's request handling costs per request; against the sidecar, what the
// sidecar's own work costs (@fastify/http-proxy's routing and destination checks, the
// hooks, metrics, request loggers, header rules, the token and the 401 replay).
//
//   node dist/bench/run.js --workloads saturation \
//     --sidecar sidecar=. --sidecar "fastify-floor=dist/bench/floors/fastify-floor.js@node --max-semi-space-size=4"
import { createServer, type IncomingMessage } from 'node:http'
import Fastify from 'fastify'
import { Pool } from 'undici'
import { forwardTo } from './node-floor.js'

const pool = new Pool(process.env.UPSTREAM_URL ?? 'http://127.0.0.1:8081', { connections: 128 })
const app = Fastify({ logger: false })
app.removeAllContentTypeParsers()
app.addContentTypeParser('*', (_req, payload, done) => { done(null, payload) })
app.all('/*', (request, reply) => {
  reply.hijack()
  forwardTo(pool, request.raw, reply.raw, (request.body as IncomingMessage | undefined) ?? null)
})
await app.listen({ port: Number(process.env.PORT ?? 8080), host: '127.0.0.1' })
createServer((_req, res) => { res.end('ok') }).listen(Number(process.env.ADMIN_PORT ?? 9090), '127.0.0.1')
process.on('SIGTERM', () => { process.exit(0) })
