// What the egress proxy's hop costs per request: two sidecars in the same run, one direct to
// an HTTPS upstream, one through Debian's tinyproxy (CONNECT, Basic authentication), taking
// turns (A B A B …). Figures: requests per second, latency p50 / p99 as the client saw it,
// and CPU per request of the sidecar and of tinyproxy (from /proc/<pid>/stat).
//
//   npm run build && npx tsc -p bench/tsconfig.json && node dist/bench/egress-proxy.js [ROUNDS] [SECONDS] [CONCURRENCY]
//
// Needs tinyproxy and openssl, and an IPv4 address of this machine other than loopback
// (loopback is never proxied): the upstream listens there, behind a TLS front whose
// certificate is made for that address and trusted through NODE_EXTRA_CA_CERTS.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, connect } from 'node:net'
import { networkInterfaces, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'
import { cpuSeconds } from './lib/proc.js'

const HERE = fileURLToPath(new URL('.', import.meta.url))
const MAIN = join(HERE, '..', 'main.js')
const PROXY_USER = 'bench:bench-pw'
const CLIENT = { id: 'bench-client', secret: 'bench-secret' }

async function freePort (): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as { port: number }
  server.close()
  return port
}

function start (name: string, command: string, args: string[], env: Record<string, string> = {}): ChildProcess {
  const child = spawn(command, args, { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'ignore', 'inherit'] })
  child.once('exit', (code, signal) => { if (!stopping) console.error(`${name} exited (${code ?? signal ?? '?'})`) })
  children.push(child)
  return child
}

const children: ChildProcess[] = []
let stopping = false

async function accepting (port: number, host = '127.0.0.1'): Promise<void> {
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = connect(port, host, () => { socket.destroy(); resolve(true) })
      socket.on('error', () => { resolve(false) })
    })
    if (ok) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}

async function ready (adminPort: number): Promise<void> {
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${adminPort}/readyz`)).ok) return
    } catch {}
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}

interface Run { requests: number, seconds: number, p50: number, p99: number, sidecarCpu: number, proxyCpu: number }

/** `seconds` of GETs at `concurrency` over keep-alive connections to the sidecar on `port`. */
async function load (port: number, seconds: number, concurrency: number, pids: { sidecar: number, proxy: number }): Promise<Run> {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: concurrency })
  const latencies: number[] = []
  const cpu0 = { sidecar: cpuSeconds(pids.sidecar) ?? 0, proxy: cpuSeconds(pids.proxy) ?? 0 }
  const started = performance.now()
  const until = started + seconds * 1000
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < until) {
      const t0 = performance.now()
      const { statusCode, body } = await pool.request({ method: 'GET', path: '/v2/store/orders/42' })
      await body.dump()
      if (statusCode !== 200) throw new Error(`answer ${statusCode}`)
      latencies.push(performance.now() - t0)
    }
  }))
  const elapsed = (performance.now() - started) / 1000
  const cpu1 = { sidecar: cpuSeconds(pids.sidecar) ?? 0, proxy: cpuSeconds(pids.proxy) ?? 0 }
  await pool.close()
  latencies.sort((a, b) => a - b)
  const at = (q: number): number => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0
  return {
    requests: latencies.length,
    seconds: elapsed,
    p50: at(0.5),
    p99: at(0.99),
    sidecarCpu: (cpu1.sidecar - cpu0.sidecar) / latencies.length,
    proxyCpu: (cpu1.proxy - cpu0.proxy) / latencies.length
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0
const fmt = (x: number, digits = 0): string => x.toFixed(digits)

/** The TLS front, run as `egress-proxy.js --tls-front PORT HOST TARGET_PORT KEY CERT`. */
async function tlsFront ([port, host, target, key, cert]: string[]): Promise<void> {
  const { readFileSync } = await import('node:fs')
  const tls = await import('node:tls')
  tls.createServer({ key: readFileSync(key ?? ''), cert: readFileSync(cert ?? '') }, (clear) => {
    const plain = connect(Number(target), '127.0.0.1')
    clear.on('error', () => { plain.destroy() })
    plain.on('error', () => { clear.destroy() })
    clear.pipe(plain).pipe(clear)
  }).listen(Number(port), host)
}

async function main (): Promise<void> {
  const [rounds = 6, seconds = 3, concurrency = 8] = process.argv.slice(2).map(Number)
  const address = Object.values(networkInterfaces()).flat().find((i) => i !== undefined && !i.internal && i.family === 'IPv4')?.address
  if (address === undefined) throw new Error('needs an IPv4 address other than loopback')
  const dir = mkdtempSync(join(tmpdir(), 'egress-bench-'))
  const [key, cert] = [join(dir, 'key.pem'), join(dir, 'cert.pem')]
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1',
    '-subj', `/CN=${address}`, '-addext', `subjectAltName=IP:${address}`, '-addext', 'basicConstraints=critical,CA:TRUE'], { stdio: 'ignore' })

  const [upstreamPort, frontPort, standInPort, tinyPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()])
  start('upstream', process.execPath, [join(HERE, 'upstream.js'), String(upstreamPort)])
  start('tls front', process.execPath, [fileURLToPath(import.meta.url), '--tls-front', String(frontPort), address, String(upstreamPort), key, cert])
  start('stand-in', process.execPath, [MAIN, 'stand-in'], {
    STAND_IN_PORT: String(standInPort), STAND_IN_CLIENT_ID: CLIENT.id, STAND_IN_CLIENT_SECRET: CLIENT.secret, LOG_LEVEL: 'warn'
  })
  writeFileSync(join(dir, 'tinyproxy.conf'), [`Port ${tinyPort}`, 'Listen 127.0.0.1', 'Timeout 60', 'MaxClients 200', 'Allow 127.0.0.1',
    'DisableViaHeader Yes', 'LogLevel Warning', `BasicAuth ${PROXY_USER.replace(':', ' ')}`].join('\n') + '\n')
  const tiny = start('tinyproxy', 'tinyproxy', ['-d', '-c', join(dir, 'tinyproxy.conf')])
  await Promise.all([accepting(upstreamPort), accepting(frontPort, address), accepting(standInPort), accepting(tinyPort)])

  const targets: Array<{ name: string, port: number, admin: number, child: ChildProcess }> = []
  for (const name of ['direct', 'via tinyproxy']) {
    const [port, admin] = [await freePort(), await freePort()]
    const child = start(name, process.execPath, [MAIN], {
      AUTH_URL: `http://127.0.0.1:${standInPort}`,
      UPSTREAM_URL: `https://${address}:${frontPort}`,
      CLIENT_ID: CLIENT.id,
      CLIENT_SECRET: CLIENT.secret,
      PORT: String(port),
      ADMIN_PORT: String(admin),
      ADMIN_HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      NODE_EXTRA_CA_CERTS: cert,
      ...(name === 'direct' ? {} : { HTTPS_PROXY: `http://${PROXY_USER}@127.0.0.1:${tinyPort}` })
    })
    targets.push({ name, port, admin, child })
  }
  await Promise.all(targets.map(async (t) => { await ready(t.admin) }))

  const runs = new Map<string, Run[]>(targets.map((t) => [t.name, []]))
  for (const t of targets) await load(t.port, 0.5, concurrency, { sidecar: t.child.pid ?? 0, proxy: tiny.pid ?? 0 }) // warm-up
  for (let round = 0; round < rounds; round++) {
    for (const t of round % 2 === 0 ? targets : [...targets].reverse()) {
      runs.get(t.name)?.push(await load(t.port, seconds, concurrency, { sidecar: t.child.pid ?? 0, proxy: tiny.pid ?? 0 }))
    }
  }

  console.log(`egress proxy hop, ${new Date().toISOString()}, node ${process.version}, ${rounds} rounds × ${seconds} s, ${concurrency} connections, GET 231 B over HTTPS\n`)
  console.log('| route | req/s | p50 ms | p99 ms | sidecar CPU µs/req | tinyproxy CPU µs/req |')
  console.log('|---|---|---|---|---|---|')
  const medians = new Map<string, Record<string, number>>()
  for (const [name, list] of runs) {
    const m = {
      rps: median(list.map((r) => r.requests / r.seconds)),
      p50: median(list.map((r) => r.p50)),
      p99: median(list.map((r) => r.p99)),
      sidecar: median(list.map((r) => r.sidecarCpu * 1e6)),
      proxy: median(list.map((r) => r.proxyCpu * 1e6))
    }
    medians.set(name, m)
    console.log(`| ${name} | ${fmt(m.rps)} | ${fmt(m.p50, 2)} | ${fmt(m.p99, 2)} | ${fmt(m.sidecar)} | ${name === 'direct' ? '–' : fmt(m.proxy)} |`)
  }
  const [a, b] = [medians.get('direct'), medians.get('via tinyproxy')]
  if (a !== undefined && b !== undefined) {
    console.log(`\nthrough the proxy: p50 +${fmt(((b.p50 ?? 0) - (a.p50 ?? 0)) * 1000)} µs, req/s ×${fmt((b.rps ?? 0) / (a.rps ?? 1), 2)}, ` +
      `sidecar CPU ×${fmt((b.sidecar ?? 0) / (a.sidecar ?? 1), 2)}, plus tinyproxy's ${fmt(b.proxy ?? 0)} µs/req`)
  }
}

if (process.argv[2] === '--tls-front') {
  void tlsFront(process.argv.slice(3))
} else {
  main().catch((err: unknown) => { console.error(err); process.exitCode = 1 }).finally(() => {
    stopping = true
    for (const child of children) if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGTERM')
  })
}
