import { Agent, request as httpRequest } from 'node:http'
import type { Socket } from 'node:net'
import t from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { startRawUpstream } from '../helpers/raw-upstream.js'
import { startUpstream } from '../helpers/upstream.js'

// An upstream that answers before reading the body, and an answer held back and then
// cut by a reset. The socket states are driven, not raced: the upstream writes its
// answer and only then resets the connection, so the sidecar's next body write fails
// while the answer waits unread (src/upstream/socket-internals.ts; test/upstream/socket-internals.test.ts
// drives the same states on one socket).

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

/** Writes `answer`, and once it is on its way, resets the connection (RST, the unread body dropped). */
function answerThenReset (socket: Socket, answer: string): void {
  socket.write(answer, () => { socket.resetAndDestroy() })
}

const TOO_LARGE = 'upstream says: too large'

for (const closing of [true, false]) {
  t.test(`an upstream that answers 413 before reading an 8 MiB upload${closing ? ' and closes' : ''}: the caller gets that 413 every time`, async (t) => {
    const standIn = await startStandIn(t)
    const upstream = closing
      ? await startRawUpstream(t, (socket) => {
        answerThenReset(socket, `HTTP/1.1 413 Payload Too Large\r\ncontent-type: text/plain\r\nconnection: close\r\ncontent-length: ${TOO_LARGE.length}\r\n\r\n${TOO_LARGE}`)
      })
      : await startUpstream(t, (_req, res) => {
        res.writeHead(413, { 'content-type': 'text/plain' })
        res.end(TOO_LARGE)
      }, { streaming: true })
    const { app, proxyUrl, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
    const agent = new Agent({ keepAlive: true })
    t.teardown(() => { agent.destroy() })
    const answers: string[] = []
    for (let i = 0; i < 8; i++) answers.push(await upload(proxyUrl + '/v2/store/orders', 8 * 1024 * 1024, agent))
    t.same(new Set(answers), new Set([`413 ${TOO_LARGE}`]))
    t.same(logs.entries().filter((e) => e.msg === 'upstream request failed'), [], 'never taken for an upstream failure')
    // The rest of each body is discarded within a bound, so a shutdown is not held open.
    const started = performance.now()
    await app.close()
    t.ok(performance.now() - started < 5000, 'closes promptly')
  })
}

t.test('a held-back 500 cut by a reset mid-body: the caller gets 502, never the partial answer as complete', async (t) => {
  const standIn = await startStandIn(t)
  // Close-delimited (no length): only the connection's end says where the body ends. A 500
  // is held back to look for the gateway's rate-limit fault (cool-downs are on by default).
  const upstream = await startRawUpstream(t, (socket) => {
    answerThenReset(socket, 'HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n\r\n{"fault":{"faultstring":"cut her')
  })
  const { proxyUrl, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url })
  const answer = await new Promise<{ status: number, body: string }>((resolve, reject) => {
    httpRequest(proxyUrl + '/v2/store/products', (res) => {
      let body = ''
      res.on('data', (c: Buffer) => { body += c.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body }) })
    }).on('error', reject).end()
  })
  t.equal(answer.status, 502)
  t.same(JSON.parse(answer.body), { error: 'UPSTREAM_UNREACHABLE', message: 'the upstream could not be reached' })
  t.match(logs.entries().filter((e) => e.msg === 'upstream request failed'), [{ code: 'ECONNRESET' }], 'logged as the reset it was')
})
