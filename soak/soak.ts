// The soak run (not part of the tests): steady traffic through a real sidecar
// process for N minutes over short-lived tokens, while the token endpoint goes down
// and comes back. Reports caller errors, token requests, expired tokens sent and
// the sidecar's RSS and V8 old space over time.
//
//   npm run soak -- --minutes 10 [--rate 100] [--token-lifetime-s 10]
//
// The token endpoint answers 503 for the last 20 s of every even minute — longer
// than a token lives, so callers must get fast 503s and then recover by themselves
// within seconds — and stays up through odd minutes, where nothing may fail once
// the sidecar has recovered. All traffic stays on 127.0.0.1.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { Agent, request } from 'undici'
import { shippedNodeFlags } from '../bench/lib/shipped.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET } from '../src/demo/config.js'
import { createStandIn } from '../src/demo/stand-in.js'

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    rate: { type: 'string', default: '100' },
    'token-lifetime-s': { type: 'string', default: '10' }
  }
})
const minutes = Number(values.minutes)
const rate = Number(values.rate)
const lifetimeMs = Number(values['token-lifetime-s']) * 1000
const durationMs = Math.round(minutes * 60_000)

interface Minute {
  requests: number
  ok: number
  tokenUnavailable: number
  otherErrors: number
  tokenRequests: number
  tokenRequestsFailed: number
  expiredTokensSent: number
  outageS: number
  rssMiB: number[]
  oldSpaceMiB: number[]
}
const newMinute = (): Minute => ({ requests: 0, ok: 0, tokenUnavailable: 0, otherErrors: 0, tokenRequests: 0, tokenRequestsFailed: 0, expiredTokensSent: 0, outageS: 0, rssMiB: [], oldSpaceMiB: [] })

const started = Date.now()
const minuteOf = (at = Date.now()) => Math.min(Math.floor((at - started) / 60_000), Math.ceil(minutes) - 1)
const rows: Minute[] = Array.from({ length: Math.ceil(minutes) }, newMinute)
const row = (at?: number) => rows[minuteOf(at)] as Minute

/** The schedule: seconds [40, 60) of even minutes (counting from 0) are down. */
function endpointDown (at = Date.now()): boolean {
  const minute = Math.floor((at - started) / 60_000)
  return minute % 2 === 0 && ((at - started) / 1000) % 60 >= 40
}

/** From the end of each outage to the first 200 answer after it. */
const recoveriesMs: number[] = []
function noteSuccess (at: number): void {
  const minute = Math.floor((at - started) / 60_000)
  const outageEnd = started + minute * 60_000
  if (minute % 2 === 1 && recoveriesMs.length < (minute + 1) / 2) recoveriesMs.push(at - outageEnd)
}

// The stand-in TI APIs: the store API checks every token's expiry, so a 401 there
// means the sidecar sent an expired (or unknown) token.
const standIn = createStandIn({ clientId: DEMO_CLIENT_ID, clientSecret: DEMO_CLIENT_SECRET, tokenLifetimeMs: lifetimeMs })
standIn.app.addHook('onResponse', async (req, reply) => {
  if (req.url.startsWith('/v2/') && reply.statusCode === 401) row().expiredTokensSent += 1
})
await standIn.app.listen({ host: '127.0.0.1', port: 0 })
const standInUrl = `http://127.0.0.1:${(standIn.app.server.address() as AddressInfo).port}`

// The token endpoint as the sidecar sees it: the stand-in's, or 503 during an outage.
const front = createServer((req, res) => {
  const body: Buffer[] = []
  req.on('data', (c: Buffer) => body.push(c))
  req.on('end', () => {
    const r = row()
    r.tokenRequests += 1
    if (endpointDown()) {
      r.tokenRequestsFailed += 1
      res.writeHead(503, { 'content-type': 'application/json' })
      res.end('{"fault":{"faultstring":"The Service is temporarily unavailable"}}')
      return
    }
    fetch(standInUrl + (req.url ?? ''), { method: 'POST', headers: { 'content-type': String(req.headers['content-type']) }, body: Buffer.concat(body) })
      .then(async (answer) => {
        res.writeHead(answer.status, { 'content-type': 'application/json' })
        res.end(await answer.text())
      }, () => { res.writeHead(502); res.end() })
  })
})
await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve))
const frontUrl = `http://127.0.0.1:${(front.address() as AddressInfo).port}`

// The sidecar, as it runs in production: its own process, the shipped node flags, default configuration.
const main = fileURLToPath(new URL('../../dist/main.js', import.meta.url))
const repo = fileURLToPath(new URL('../..', import.meta.url))
const sidecar = spawn(process.execPath, [...shippedNodeFlags(repo), main], {
  env: {
    PATH: process.env.PATH ?? '',
    AUTH_URL: frontUrl,
    UPSTREAM_URL: standInUrl,
    CLIENT_ID: DEMO_CLIENT_ID,
    CLIENT_SECRET: DEMO_CLIENT_SECRET,
    PORT: '0',
    ADMIN_PORT: '0',
    ADMIN_HOST: '127.0.0.1',
    LOG_LEVEL: 'info'
  },
  stdio: ['ignore', 'pipe', 'inherit']
})
let output = ''
sidecar.stdout.setEncoding('utf8').on('data', (c: string) => { output += c.length > 0 && output.length < 1_000_000 ? c : '' })
const listening = (listener: string) => new Promise<string>((resolve, reject) => {
  const pattern = new RegExp(`"listener":"${listener}","msg":"Server listening at (http://[^"]+)"`)
  const timer = setInterval(() => {
    const m = pattern.exec(output)
    if (m?.[1] !== undefined) { clearInterval(timer); resolve(m[1]) }
  }, 20)
  setTimeout(() => { clearInterval(timer); reject(new Error('the sidecar did not start')) }, 10_000)
})
const proxyUrl = await listening('proxy')
const adminUrl = await listening('admin')

function rssMiB (): number {
  const status = readFileSync(`/proc/${sidecar.pid ?? 0}/status`, 'utf8')
  return Math.round(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) / 1024 * 10) / 10
}

/**
 * V8's old space in use, from the sidecar's own /metrics. Its low point in a minute is
 * close to the live heap after the last major GC: a leak shows as a low point that climbs.
 */
async function oldSpaceMiB (): Promise<number | undefined> {
  const res = await request(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined)
  const text = await res?.body.text()
  const bytes = /^nodejs_heap_space_size_used_bytes\{space="old"\} (\d+)/m.exec(text ?? '')?.[1]
  return bytes === undefined ? undefined : Math.round(Number(bytes) / 2 ** 20 * 10) / 10
}

// Steady, evenly paced traffic; each request is bounded by a timeout.
const agent = new Agent({ connections: 64 })
const intervalMs = 1000 / rate
let sent = 0
let inflight = 0
const path = '/v2/store/products/LM358BIDR?currency=USD'

async function one (): Promise<void> {
  const at = Date.now()
  inflight += 1
  try {
    const res = await request(proxyUrl + path, { dispatcher: agent, signal: AbortSignal.timeout(10_000) })
    const text = await res.body.text()
    const r = row(at)
    r.requests += 1
    if (res.statusCode === 200) {
      r.ok += 1
      noteSuccess(Date.now())
    } else if (res.statusCode === 503 && text.includes('TOKEN_UNAVAILABLE')) r.tokenUnavailable += 1
    else r.otherErrors += 1
  } catch {
    const r = row(at)
    r.requests += 1
    r.otherErrors += 1
  } finally {
    inflight -= 1
  }
}

process.stderr.write(`soak: ${minutes} min at ${rate} req/s, ${lifetimeMs / 1000}-s tokens, sidecar pid ${sidecar.pid ?? '?'}\n`)

// Once a second: count the outage seconds, and sample the sidecar's RSS and old space every 5 s.
let seconds = 0
const observe = (): void => {
  if (Date.now() - started >= durationMs) return
  if (endpointDown()) row().outageS += 1
  if (seconds % 5 === 0) {
    const r = row()
    r.rssMiB.push(rssMiB())
    void oldSpaceMiB().then((mib) => { if (mib !== undefined) r.oldSpaceMiB.push(mib) })
  }
  seconds += 1
  setTimeout(observe, 1000 * seconds - (Date.now() - started))
}
observe()

await new Promise<void>((resolve) => {
  const tick = (): void => {
    const now = Date.now()
    if (now - started >= durationMs) { resolve(); return }
    const due = Math.floor((now - started) / intervalMs)
    while (sent < due) { sent += 1; void one() }
    setTimeout(tick, Math.max(1, intervalMs / 2))
  }
  tick()
})

// eslint-disable-next-line no-unmodified-loop-condition -- the requests decrement it as they finish
while (inflight > 0) await new Promise((resolve) => setTimeout(resolve, 50))
sidecar.kill('SIGTERM')
const exitCode = await new Promise<number | null>((resolve) => sidecar.once('exit', resolve))
await agent.close()
front.close()
await standIn.app.close()

const total = rows.reduce((a, r) => ({
  ...a,
  requests: a.requests + r.requests,
  ok: a.ok + r.ok,
  tokenUnavailable: a.tokenUnavailable + r.tokenUnavailable,
  otherErrors: a.otherErrors + r.otherErrors,
  tokenRequests: a.tokenRequests + r.tokenRequests,
  tokenRequestsFailed: a.tokenRequestsFailed + r.tokenRequestsFailed,
  expiredTokensSent: a.expiredTokensSent + r.expiredTokensSent,
  outageS: a.outageS + r.outageS,
  rssMiB: [...a.rssMiB, ...r.rssMiB],
  oldSpaceMiB: [...a.oldSpaceMiB, ...r.oldSpaceMiB]
}), newMinute())

const range = (values: number[]): string => values.length === 0 ? '-' : `${Math.min(...values)}–${Math.max(...values)}`

const fmt = (r: Minute, name: string) =>
  `| ${name} | ${r.outageS} | ${r.requests} | ${r.ok} | ${r.tokenUnavailable} | ${r.otherErrors} | ${r.tokenRequests} | ${r.tokenRequestsFailed} | ${r.expiredTokensSent} | ${range(r.rssMiB)} | ${range(r.oldSpaceMiB)} |`
process.stdout.write([
  '| minute | token endpoint down (s) | requests | 200 | 503 TOKEN_UNAVAILABLE | other errors | token requests | of which failed | expired tokens sent | sidecar RSS (MiB) | V8 old space in use (MiB) |',
  '|---|---|---|---|---|---|---|---|---|---|---|',
  ...rows.map((r, i) => fmt(r, String(i + 1))),
  fmt(total, '**all**'),
  '',
  `time from the end of each outage to the first 200: ${recoveriesMs.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(', ')}`,
  `sidecar exit code after SIGTERM: ${String(exitCode)}`,
  ''
].join('\n'))
