// Beyond MAX_CONNECTIONS open connections, a new one gets a real HTTP answer — 503 OVERLOADED
// with Retry-After and Connection: close — and is closed, never dropped without a word; real
// clients (undici, fetch, curl) read that answer, even when it arrives before their request
// is written; a connection closing makes room again.
import { execFile } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { promisify } from 'node:util'
import t, { type Test } from 'tap'
import { Client, request } from 'undici'
import { EXCESS_LINGER_MS } from '../../src/overload/manager.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { tempDir } from '../helpers/temp-dir.js'
import { startUpstream } from '../helpers/upstream.js'

const BOUND = 3
const OVERLOADED = { error: 'OVERLOADED', message: 'the sidecar is overloaded; retry later' }

/** A connection that sends the start of a head and nothing more (slowloris), open until the test ends. */
async function holdConnection (t: Test, proxyUrl: string): Promise<Socket> {
  const { hostname, port } = new URL(proxyUrl)
  const socket = connect(Number(port), hostname)
  t.teardown(() => { socket.destroy() })
  await new Promise((resolve) => socket.once('connect', resolve))
  socket.write('GET /v2/store/slow HTTP/1.1\r\nHost: x\r\n')
  return socket
}

async function boundedSidecar (t: Test, env: Record<string, string> = {}) {
  const upstream = await startUpstream(t)
  const sidecar = await startSidecar(t, upstream.url, { MAX_CONNECTIONS: String(BOUND), ...env })
  const held = []
  for (let i = 0; i < BOUND; i++) held.push(await holdConnection(t, sidecar.proxyUrl))
  await eventually(t, `${BOUND} connections counted open`, () => sidecar.app.overload.status().connections === BOUND)
  return { ...sidecar, upstream, held }
}

t.test('beyond the bound: 503 OVERLOADED, Retry-After, Connection: close, then closed; nothing sent upstream', async (t) => {
  const { proxyUrl, adminUrl, app, upstream } = await boundedSidecar(t)
  const raw = await rawRequest(proxyUrl, 'GET /v2/store/a HTTP/1.1\r\nHost: x\r\n\r\n', 5000)
  t.equal(statusOf(raw), 503)
  t.match(raw, /\r\nretry-after: 1\r\n/)
  t.match(raw, /\r\nconnection: close\r\n/)
  t.same(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)), OVERLOADED)

  // undici (keep-alive client): its GET and a 1 MiB POST it is still writing when the answer comes.
  const client = new Client(proxyUrl)
  t.teardown(() => client.destroy())
  const get = await client.request({ path: '/v2/store/b', method: 'GET' })
  t.equal(get.statusCode, 503)
  t.equal(get.headers['retry-after'], '1')
  t.same(await get.body.json(), OVERLOADED)
  const post = await client.request({ path: '/v2/store/c', method: 'POST', body: Buffer.alloc(1024 * 1024, 'x'), headers: { 'content-type': 'application/octet-stream' } })
  t.equal(post.statusCode, 503, 'a POST still sending its body reads the answer')
  t.same(await post.body.json(), OVERLOADED)
  const fetched = await fetch(`${proxyUrl}/v2/store/d`)
  t.equal(fetched.status, 503, 'fetch')
  t.same(await fetched.json(), OVERLOADED)

  t.equal(upstream.received.length, 0, 'nothing reached the upstream')
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_overload_shed_total', { reason: 'connections' }), 4)
  t.equal(await metricValue(adminUrl, 'store_auth_proxy_errors_total', { code: 'OVERLOADED' }), 4)
  t.match(app.overload.status(), { state: 'shedding', connections: BOUND, maxConnections: BOUND })
  const ready = await request(adminUrl + '/readyz')
  t.equal(ready.statusCode, 200, 'still ready')
  t.match((await ready.body.json() as { reason: string }).reason, `at the bound of ${BOUND} open connections`)
})

t.test('curl reads the answer, for a GET and for a POST whose body it has not sent yet', async (t) => {
  const { proxyUrl } = await boundedSidecar(t)
  const curl = async (...args: string[]): Promise<string> => {
    try {
      return (await promisify(execFile)('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code}', ...args])).stdout
    } catch (err) {
      return `curl failed: ${(err as { stderr?: string }).stderr ?? String(err)}`
    }
  }
  t.equal(await curl(`${proxyUrl}/v2/store/e`), '503')
  // `Expect: 100-continue` off: curl writes the 1 MiB body at once, while the answer arrives.
  const body = join(tempDir('excess-'), 'body')
  writeFileSync(body, Buffer.alloc(1024 * 1024, 'x'))
  t.equal(await curl('-H', 'Expect:', '--data-binary', `@${body}`, `${proxyUrl}/v2/store/f`), '503')
})

t.test('an excess connection is answered before it sends anything; what it sends after is read and discarded, then it is closed', async (t) => {
  const { proxyUrl, app } = await boundedSidecar(t)
  const open = async (): Promise<number> => await new Promise((resolve, reject) => {
    app.proxy.server.getConnections((err, n) => { if (err === null) resolve(n); else reject(err) })
  })
  const { hostname, port } = new URL(proxyUrl)
  // Half-open allowed: this caller never closes its side, so the sidecar's linger must end it.
  const socket = connect({ port: Number(port), host: hostname, allowHalfOpen: true })
  t.teardown(() => { socket.destroy() })
  let answer = ''
  const errors: string[] = []
  socket.setEncoding('latin1').on('data', (chunk: string) => { answer += chunk })
  socket.on('error', (err: NodeJS.ErrnoException) => { errors.push(err.code ?? err.message) })
  await new Promise((resolve) => socket.once('end', resolve))
  const answeredAt = performance.now()
  t.equal(statusOf(answer), 503, 'answered unasked, then the sidecar ended its side')
  t.match(answer, /"OVERLOADED"/)
  // More than the kernel and Node buffer: unless the sidecar reads it, the close would be a reset.
  const late = 4 * 1024 * 1024
  socket.write(`POST /v2/store/late HTTP/1.1\r\nHost: x\r\nContent-Length: ${late}\r\n\r\n`)
  socket.write(Buffer.alloc(late, 'x'))
  t.equal(await open(), BOUND + 1, 'still open on the sidecar: lingering')
  await eventually(t, 'the lingering connection closed by the sidecar', async () => await open() === BOUND, EXCESS_LINGER_MS * 5)
  t.ok(performance.now() - answeredAt >= EXCESS_LINGER_MS / 2, 'not before its linger')
  t.equal(answer.match(/HTTP\/1\.1 /g)?.length, 1, 'one answer: the late request was read and discarded')
  t.same(errors, [], 'no reset')
})

t.test('a connection that closes makes room: the next one is served', async (t) => {
  const { proxyUrl, app, held } = await boundedSidecar(t)
  held[0]?.destroy()
  await eventually(t, 'the closed connection no longer counted', () => app.overload.status().connections === BOUND - 1)
  const res = await request(`${proxyUrl}/v2/store/g`, { headers: { connection: 'close' } })
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.match(app.overload.status(), { state: 'normal' })
})

t.test('MAX_CONNECTIONS=0: no bound', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl, app } = await startSidecar(t, upstream.url, { MAX_CONNECTIONS: '0' })
  for (let i = 0; i < 5; i++) await holdConnection(t, proxyUrl)
  const res = await request(`${proxyUrl}/v2/store/h`)
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.match(app.overload.status(), { connections: 0, maxConnections: 0, state: 'normal' })
})
