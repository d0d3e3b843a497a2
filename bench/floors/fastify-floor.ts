// A floor for the benchmark, not a product: the setup a Node.js team would write first.
// Fastify and @fastify/http-proxy on their defaults (Fastify's logger is off by default;
// reply-from over undici), with one addition: a static Bearer header on every request
// upstream. Against the sidecar it shows what the sidecar costs next to the obvious
// alternative on the same stack; against node-floor, what this stack's defaults cost.
//
// run.ts starts it as a target of every run (--no-floors leaves it out), like a sidecar:
// it takes UPSTREAM_URL, PORT and ADMIN_PORT; its admin port answers 200 to anything.
import { createServer } from 'node:http'
import proxy from '@fastify/http-proxy'
import Fastify from 'fastify'

const app = Fastify()
await app.register(proxy, {
  upstream: process.env.UPSTREAM_URL ?? 'http://127.0.0.1:8081',
  replyOptions: {
    rewriteRequestHeaders: (_request, headers) => ({ ...headers, authorization: 'Bearer floor-token' })
  }
})
await app.listen({ port: Number(process.env.PORT ?? 8080), host: '127.0.0.1' })
createServer((_req, res) => { res.end('ok') }).listen(Number(process.env.ADMIN_PORT ?? 9090), '127.0.0.1')
process.on('SIGTERM', () => { process.exit(0) })
