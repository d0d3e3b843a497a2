import { Agent, request as httpRequest } from 'node:http'
import t from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", A.2: an upstream that answers before reading the body.

/** Uploads `bytes` in 64 KiB writes and resolves with the answer, or the error the caller saw. */
async function upload (url: string, bytes: number, agent: Agent): Promise<string> {
  return await new Promise((resolve) => {
    const req = httpRequest(url, { method: 'POST', agent, headers: { 'content-type': 'application/octet-stream', 'content-length': bytes } }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => { resolve(`${res.statusCode ?? 0} ${body}`) })
    })
    req.on('error', (err: NodeJS.ErrnoException) => { resolve(`caller error ${err.code ?? err.message}`) })
    const chunk = Buffer.alloc(64 * 1024, 1)
    let sent = 0
    const pump = (): void => {
      while (sent < bytes) {
        sent += chunk.length
        if (!req.write(chunk)) {
          req.once('drain', pump)
          return
        }
      }
      req.end()
    }
    pump()
  })
}

for (const closing of [true, false]) {
  t.test(`an upstream that answers 413 before reading an 8 MiB upload${closing ? ' and closes' : ''}: the caller gets that 413 every time`, async (t) => {
    const standIn = await startStandIn(t)
    const upstream = await startUpstream(t, (_req, res) => {
      res.writeHead(413, { 'content-type': 'text/plain', ...(closing ? { connection: 'close' } : {}) })
      res.end('upstream says: too large')
    }, { streaming: true })
    const { app, proxyUrl, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
    const agent = new Agent({ keepAlive: true })
    t.teardown(() => { agent.destroy() })
    const answers: string[] = []
    for (let i = 0; i < 8; i++) answers.push(await upload(proxyUrl + '/v2/store/orders', 8 * 1024 * 1024, agent))
    t.same(new Set(answers), new Set(['413 upstream says: too large']))
    t.same(logs.entries().filter((e) => e.msg === 'upstream request failed'), [], 'never taken for an upstream failure')
    // The rest of each body is discarded within a bound, so a shutdown is not held open.
    const started = performance.now()
    await app.close()
    t.ok(performance.now() - started < 5000, 'closes promptly')
  })
}
