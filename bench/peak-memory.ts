// Peak memory of the built sidecar under the worst load the Helm chart's defaults admit,
// to set the chart's resources.requests/limits.memory from (helm/store-auth-proxy/values.yaml).
// Not a benchmark of speed: it reports memory only. Run it alone on a quiet machine:
//
//   npm run build && npx tsc -p bench/tsconfig.json && node dist/bench/peak-memory.js [runs]
//
// Starts the stand-in TI APIs (`node dist/main.js stand-in`) as token endpoint and upstream,
// and the sidecar as shipped (`node <the image's flags> dist/main.js`, the chart's
// default settings), then, after the first token:
//   1. idle: RSS and RssAnon;
//   2. 100 keep-alive callers, each sending GET /v2/store/products/LM358BIDR back to back, 8 s;
//   3. 1000 concurrent 60 KB POST /v2/store/orders, three bursts.
// RSS and RssAnon are sampled from /proc/PID/status every 20 ms; peak RSS is VmHWM, reset
// between phases. RssAnon is what stays when the kernel reclaims file pages: the part a
// memory limit really has to hold.
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'
import { REPO } from './lib/options.js'
import { shippedNodeFlags } from './lib/shipped.js'

const MAIN = fileURLToPath(new URL('../main.js', import.meta.url))
const CALLERS = 100
const CALLERS_MS = 8000
const POSTS = 1000
const POST_BYTES = 60 * 1024
const BURSTS = 3

const statusKiB = (pid: number, field: string): number => {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return Number(m?.[1] ?? NaN)
}
const mib = (kib: number): number => Math.round(kib / 1024 * 10) / 10

async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => { resolve(port) })
    }).on('error', reject)
  })
}

function start (args: string[], env: Record<string, string>, nodeArgs: string[] = []): ChildProcess {
  const child = spawn(process.execPath, [...nodeArgs, MAIN, ...args], {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'inherit']
  })
  process.on('exit', () => child.kill('SIGKILL'))
  return child
}

async function until (check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000
  while (Date.now() < deadline) {
    if (await check().catch(() => false)) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/** Samples RSS and RssAnon while fn runs; peak RSS from VmHWM (reset first). */
async function measure (pid: number, fn: () => Promise<void>): Promise<{ peakRss: number, peakAnon: number }> {
  writeFileSync(`/proc/${pid}/clear_refs`, '5')
  let peakAnon = statusKiB(pid, 'RssAnon')
  const timer = setInterval(() => { peakAnon = Math.max(peakAnon, statusKiB(pid, 'RssAnon')) }, 20)
  try {
    await fn()
  } finally {
    clearInterval(timer)
  }
  peakAnon = Math.max(peakAnon, statusKiB(pid, 'RssAnon'))
  return { peakRss: mib(statusKiB(pid, 'VmHWM')), peakAnon: mib(peakAnon) }
}

async function once (): Promise<Record<string, number>> {
  const [standInPort, port, adminPort] = [await freePort(), await freePort(), await freePort()]
  const standIn = start(['stand-in'], { STAND_IN_PORT: String(standInPort) })
  const standInUrl = `http://127.0.0.1:${standInPort}`
  await until(async () => (await fetch(`${standInUrl}/healthz`)).ok, 'the stand-in')
  const sidecar = start(['serve'], {
    AUTH_URL: standInUrl,
    UPSTREAM_URL: standInUrl,
    CLIENT_ID: 'demo-client',
    CLIENT_SECRET: 'Zm9v+YmFy/c2VjcmV0=',
    PORT: String(port),
    ADMIN_PORT: String(adminPort)
  }, shippedNodeFlags(REPO))
  const pid = sidecar.pid ?? NaN
  await until(async () => (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).ok, 'the sidecar\'s first token')
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const idleRss = mib(statusKiB(pid, 'VmRSS'))
  const idleAnon = mib(statusKiB(pid, 'RssAnon'))

  const proxy = `http://127.0.0.1:${port}`
  const callers = new Pool(proxy, { connections: CALLERS, pipelining: 1 })
  let calls = 0
  const keepAlive = await measure(pid, async () => {
    const end = Date.now() + CALLERS_MS
    await Promise.all(Array.from({ length: CALLERS }, async () => {
      while (Date.now() < end) {
        const { body } = await callers.request({ path: '/v2/store/products/LM358BIDR?currency=USD', method: 'GET' })
        await body.dump()
        calls += 1
      }
    }))
  })
  await callers.close()

  const order = JSON.stringify({ lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 1 }], note: '' })
  const body = order.replace('"note":""', `"note":"${'x'.repeat(POST_BYTES - order.length)}"`)
  const posters = new Pool(proxy, { connections: POSTS, pipelining: 1 })
  const statuses = new Map<number, number>()
  const posts = await measure(pid, async () => {
    for (let burst = 0; burst < BURSTS; burst++) {
      await Promise.all(Array.from({ length: POSTS }, async () => {
        const res = await posters.request({ path: '/v2/store/orders', method: 'POST', body, headers: { 'content-type': 'application/json' } })
        await res.body.dump()
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1)
      }))
    }
  })
  await posters.close()
  sidecar.kill('SIGKILL')
  standIn.kill('SIGKILL')
  process.stderr.write(`keep-alive calls: ${calls}; POST answers: ${JSON.stringify(Object.fromEntries(statuses))}\n`)
  return {
    idleRss,
    idleAnon,
    keepAlivePeakRss: keepAlive.peakRss,
    keepAlivePeakAnon: keepAlive.peakAnon,
    postsPeakRss: posts.peakRss,
    postsPeakAnon: posts.peakAnon
  }
}

const runs = Number(process.argv[2] ?? 2)
process.stdout.write(`node ${process.version}, ${new Date().toISOString()}; MiB\n`)
for (let i = 0; i < runs; i++) process.stdout.write(`${JSON.stringify(await once())}\n`)
process.exit(0)
