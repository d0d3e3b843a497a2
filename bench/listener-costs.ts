// What a peer can make the sidecar hold, per connection and per request, on each listener:
// the built sidecar (`node dist/main.js serve`, defaults) is measured by its private memory
// (RssAnon, what an OOM kill is made of) before and after each hold. docs/overload.md states
// the figures. Loopback only; every connection is closed before the next step.
//   npm run build && npx tsc -p bench/tsconfig.json && node dist/bench/listener-costs.js
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { freePort, httpOk, waitFor } from './lib/processes.js'

const MAIN = fileURLToPath(new URL('../dist/main.js', import.meta.url))
const N = 1000

const privateKiB = (pid: number): number => Number(/^RssAnon:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN)

async function open (port: number, n: number, bytes: string): Promise<Socket[]> {
  return await Promise.all(Array.from({ length: n }, async () => await new Promise<Socket>((resolve) => {
    const socket = connect(port, '127.0.0.1', () => { socket.write(bytes); resolve(socket) })
    socket.on('error', () => {})
  })))
}

async function measure (pid: number, what: string, hold: () => Promise<Socket[]>, per: number): Promise<void> {
  await sleep(1500)
  const before = privateKiB(pid)
  const sockets = await hold()
  await sleep(2000)
  const after = privateKiB(pid)
  console.log(`${what.padEnd(58)} ${String(Math.round((after - before) * 1024 / per)).padStart(7)} B each (${before} -> ${after} KiB)`)
  for (const socket of sockets) socket.destroy()
}

const [standInPort, port, adminPort] = [await freePort(), await freePort(), await freePort()]
const standIn = spawn(process.execPath, [MAIN, 'stand-in'], { stdio: 'ignore', env: { PATH: process.env.PATH, STAND_IN_PORT: String(standInPort) } })
await waitFor('the stand-in', async () => await httpOk(`http://127.0.0.1:${standInPort}/healthz`), 60_000, 50)
const held: ServerResponse[] = []
const upstream = createServer((req: IncomingMessage, res: ServerResponse) => { req.resume(); held.push(res) })
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
const sidecar = spawn(process.execPath, [MAIN, 'serve'], {
  stdio: ['ignore', 'ignore', 'inherit'],
  env: {
    PATH: process.env.PATH,
    AUTH_URL: `http://127.0.0.1:${standInPort}`,
    UPSTREAM_URL: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    CLIENT_ID: 'demo-client',
    CLIENT_SECRET: 'Zm9v+YmFy/c2VjcmV0=',
    PORT: String(port),
    ADMIN_HOST: '127.0.0.1',
    ADMIN_PORT: String(adminPort),
    MAX_CONNECTIONS: String(2 * N),
    ADMIN_MAX_CONNECTIONS: String(2 * N),
    MAX_IN_FLIGHT_REQUESTS: String(2 * N)
  }
})
const pid = sidecar.pid ?? 0
await waitFor('the sidecar\'s first token', async () => await httpOk(`http://127.0.0.1:${adminPort}/readyz`), 30_000, 50)
const fields = (n: number): string => Array.from({ length: n }, (_, i) => `x${i}: ${i}\r\n`).join('')
console.log(`listener costs, ${new Date().toISOString().slice(0, 10)}, node ${process.version}, ${N} at a time`)
await measure(pid, 'proxy: unfinished head, one line', async () => await open(port, N, 'GET /v2/store/a HTTP/1.1\r\n'), N)
await measure(pid, 'proxy: unfinished head, 99 tiny fields (MAX_HEADER_COUNT 100)', async () => await open(port, N, `GET /v2/store/a HTTP/1.1\r\n${fields(99)}`), N)
await measure(pid, 'admin: unfinished head, one line', async () => await open(adminPort, N, 'GET /livez HTTP/1.1\r\n'), N)
await measure(pid, 'proxy: request in flight, 10 fields', async () => await open(port, N, `GET /v2/store/a HTTP/1.1\r\nHost: x\r\n${fields(8)}\r\n`), N)
await measure(pid, 'proxy: request in flight, 100 tiny fields', async () => await open(port, N, `GET /v2/store/a HTTP/1.1\r\nHost: x\r\n${fields(98)}\r\n`), N)
for (const res of held) res.destroy()
sidecar.kill('SIGKILL')
upstream.close()
standIn.kill('SIGKILL')
