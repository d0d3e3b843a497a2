// The built sidecar inside a memory cgroup of 128 MiB, driven through four loads one after
// the other in one process, to see whether it lives inside a pod's memory limit:
//   (a) wrk, 100 keep-alive callers, 8 s                         — entirely 2xx;
//   (b) 1000 concurrent 60 KB POSTs, each on its own connection  — every caller a status line;
//   (c) 1500 concurrent calls the upstream answers 401 with a 10 KB body (held back for the
//       replay, replayed once with a new token, answered 401 again) — every caller a status line;
//   (d) 3000 slowloris connections (a header line every second, 12 s) — the sidecar alive;
// then a plain call, answered 200. Not a test (not in `npm test`): it needs root and a
// memory cgroup, and takes about a minute. Run it as root:
//
//   npm run bench:overload [-- --busy] [--limit-mib 128]
//
// --busy keeps both cores busy (`node -e 'for(;;);'` twice) while it runs. The sidecar runs
// as the image runs it: `node` with `npm start`'s flags, GLIBC_TUNABLES as the Dockerfile
// sets it, the default configuration; the stand-in TI APIs (`node dist/main.js stand-in`)
// are the token endpoint, and the upstream is this script's own (200, or 401 with 10 KB).
// Exits 1 when the sidecar died, a caller of (b) or (c) got no status line, (a) had a
// non-2xx answer or a socket error, or the plain call was not answered 200.
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { connect, type Socket } from 'node:net'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Pool } from 'undici'
import { createMemoryCgroup, watchPeak, type MemoryCgroup } from './lib/memory-cgroup.js'
import { MIB, REPO } from './lib/options.js'
import { freePort, httpOk, killChildrenOnExit, launch, runToEnd, sleep, stop, waitFor, type Spawned } from './lib/processes.js'
import { shippedNodeFlags } from './lib/shipped.js'
import { SMALL_PATH } from './lib/targets.js'

const POSTS = 1000
const POST_BYTES = 60 * 1024
const DENIED = 1500
const DENIED_BODY_BYTES = 10 * 1024
const SLOWLORIS = 3000
const SLOWLORIS_MS = 12_000
/** Bounds each caller's wait: a caller still waiting after it got no status line. */
const CALLER_LIMIT_MS = 60_000

/** The Dockerfile's value, read from it so the two cannot drift. */
function imageGlibcTunables (): string {
  const match = /^ENV GLIBC_TUNABLES=(\S+)$/m.exec(readFileSync(join(REPO, 'Dockerfile'), 'utf8'))
  if (match?.[1] === undefined) throw new Error('Dockerfile: no ENV GLIBC_TUNABLES line')
  return match[1]
}

/** The upstream: reads each body, then answers 200 with a small JSON, or 401 with 10 KB. */
function startUpstream (): { port: Promise<number>, deny: (on: boolean) => void, close: () => void } {
  let denying = false
  const denied = JSON.stringify({ error: 'InvalidApiKeyForGivenResource', detail: 'x'.repeat(DENIED_BODY_BYTES) })
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume()
    req.on('end', () => {
      if (denying) {
        res.writeHead(401, { 'content-type': 'application/json' }).end(denied)
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"tiPartNumber":"LM358BIDR","quantity":1000}')
      }
    })
  })
  server.keepAliveTimeout = 120_000
  const port = new Promise<number>((resolve) => {
    server.listen(0, '127.0.0.1', () => { resolve((server.address() as { port: number }).port) })
  })
  return { port, deny: (on) => { denying = on }, close: () => { server.closeAllConnections(); server.close() } }
}

interface LoadResult {
  load: string
  callers: number
  answered: number
  classes: Record<string, number>
  /** Callers without a status line, by error code. */
  errors: Record<string, number>
  alive: boolean
  peakMiB: number
  /** The highest usage sampled (every 20 ms), when memory.stat was read. */
  sampledPeakMiB: number
  statAtPeak: Record<string, number>
  note: string
}

const count = (map: Record<string, number>, key: string): void => { map[key] = (map[key] ?? 0) + 1 }
const classOf = (status: number): string => `${Math.floor(status / 100)}xx`

/** N callers at once, each on its own connection; every answer's status or error recorded. */
async function burst (origin: string, n: number, request: Parameters<Pool['request']>[0]): Promise<Pick<LoadResult, 'answered' | 'classes' | 'errors'> & { statuses: Record<string, number> }> {
  const pool = new Pool(origin, { connections: n, pipelining: 1, headersTimeout: CALLER_LIMIT_MS, bodyTimeout: CALLER_LIMIT_MS })
  const classes: Record<string, number> = {}
  const statuses: Record<string, number> = {}
  const errors: Record<string, number> = {}
  let answered = 0
  await Promise.all(Array.from({ length: n }, async () => {
    try {
      const res = await pool.request(request)
      answered += 1
      count(classes, classOf(res.statusCode))
      count(statuses, String(res.statusCode))
      await res.body.dump().catch(() => {})
    } catch (err) {
      count(errors, (err as { code?: string }).code ?? String(err))
    }
  }))
  await pool.destroy()
  return { answered, classes, errors, statuses }
}

/** wrk's summary: requests, non-2xx/3xx, socket errors. */
function parseWrk (out: string): { requests: number, non2xx: number, socketErrors: number, detail: string } {
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN)
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0)
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  const socketErrors = socket === null ? 0 : socket.slice(1).reduce((sum, v) => sum + Number(v), 0)
  return { requests, non2xx, socketErrors, detail: socket?.[0] ?? 'no socket errors' }
}

/** Slowloris: connections that send a request's head one header line a second, never ending it. */
async function slowloris (port: number, n: number, holdMs: number): Promise<{ opened: number, closedBySidecar: number, statusLines: Record<string, number>, connectErrors: Record<string, number> }> {
  const sockets: Socket[] = []
  const statusLines: Record<string, number> = {}
  const connectErrors: Record<string, number> = {}
  let opened = 0
  let closedBySidecar = 0
  let ending = false
  await Promise.all(Array.from({ length: n }, async () => await new Promise<void>((resolve) => {
    const socket = connect(port, '127.0.0.1')
    let head = ''
    socket.once('connect', () => {
      opened += 1
      sockets.push(socket)
      socket.write(`GET ${SMALL_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\n`)
      resolve()
    })
    socket.on('data', (chunk: Buffer) => {
      if (head === '') {
        head = chunk.toString('latin1').split('\r\n')[0] ?? ''
        count(statusLines, head.split(' ')[1] ?? head)
      }
    })
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (!sockets.includes(socket)) { count(connectErrors, err.code ?? String(err)); resolve() }
    })
    socket.on('close', () => { if (!ending && sockets.includes(socket)) closedBySidecar += 1 })
  })))
  const until = Date.now() + holdMs
  for (let line = 0; Date.now() < until; line++) {
    await sleep(1000)
    for (const socket of sockets) if (!socket.destroyed) socket.write(`X-Slow-${line}: 1\r\n`)
  }
  ending = true
  for (const socket of sockets) socket.destroy()
  return { opened, closedBySidecar, statusLines, connectErrors }
}

async function plainCall (origin: string): Promise<string> {
  try {
    const res = await fetch(`${origin}${SMALL_PATH}`, { signal: AbortSignal.timeout(10_000) })
    await res.arrayBuffer()
    return String(res.status)
  } catch (err) {
    return `no answer (${(err as { cause?: { code?: string } }).cause?.code ?? String(err)})`
  }
}

/** The sidecar started inside the group: a shell writes its own pid to cgroup.procs, then execs node. */
function startSidecarIn (cgroup: MemoryCgroup, env: NodeJS.ProcessEnv, logDir: string): Spawned {
  const node = [process.execPath, ...shippedNodeFlags(REPO), join(REPO, 'dist', 'main.js'), 'serve']
  return launch('sidecar', 'sh', ['-c', 'echo $$ > "$1" || exit 97; shift; exec "$@"', 'sh', cgroup.procsFile, ...node], { env, logDir })
}

function dmesgOom (): string {
  try {
    return execFileSync('dmesg', { encoding: 'utf8' }).split('\n')
      .filter((line) => /oom|Killed process|Memory cgroup/i.test(line)).slice(-6).join('\n')
  } catch {
    return 'dmesg not readable'
  }
}

const mibOf = (bytes: number): number => Math.round(bytes / MIB * 10) / 10

function table (results: LoadResult[], plain: string): string {
  const rows = results.map((r) => {
    const noStatus = Object.values(r.errors).reduce((a, b) => a + b, 0)
    const non2xx = Object.entries(r.classes).filter(([c]) => c !== '2xx').map(([c, n]) => `${c} ${n}`).join(', ') || '0'
    return `| ${r.load} | ${r.answered} / ${r.callers} | ${JSON.stringify(r.classes)} | ${non2xx} | ${noStatus === 0 ? '0' : `${noStatus} ${JSON.stringify(r.errors)}`} | ${r.alive ? 'yes' : 'NO'} | ${r.peakMiB} | ${r.note} |`
  })
  return [
    '| load | answered / callers (a: requests) | status classes | non-2xx | no status line | alive | cgroup peak MiB | note |',
    '|---|---|---|---|---|---|---|---|',
    ...rows,
    `plain call after: ${plain}`
  ].join('\n')
}

/** What memory.stat said at the sampled peak, in MiB: the process's anonymous memory, page cache, the rest (kernel). */
function statSummary (stat: Record<string, number>, peakBytes: number): string {
  const rss = stat.rss ?? stat.anon ?? 0
  const cache = stat.cache ?? stat.file ?? 0
  return `anon ${mibOf(rss)}, cache ${mibOf(cache)} (mapped ${mibOf(stat.mapped_file ?? stat.file_mapped ?? 0)}), the rest (kernel: sockets, page tables...) ${mibOf(peakBytes - rss - cache)}`
}

async function main (): Promise<void> {
  const { values } = parseArgs({ options: { busy: { type: 'boolean', default: false }, 'limit-mib': { type: 'string', default: '128' } } })
  killChildrenOnExit()
  const runDir = join('/tmp', `overload-cgroup-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  mkdirSync(runDir, { recursive: true })
  const logDir = runDir
  const spinners = values.busy ? [0, 1].map((i) => launch(`busy-${i}`, process.execPath, ['-e', 'for(;;);'], { logDir })) : []
  const upstream = startUpstream()
  const upstreamPort = await upstream.port
  const [standInPort, port, adminPort] = [await freePort(), await freePort(), await freePort()]
  const main = join(REPO, 'dist', 'main.js')
  const standIn = launch('stand-in', process.execPath, [main, 'stand-in'], { env: { PATH: process.env.PATH, STAND_IN_PORT: String(standInPort) }, logDir })
  await waitFor('the stand-in', async () => await httpOk(`http://127.0.0.1:${standInPort}/healthz`), 20_000, 50)

  const cgroup = createMemoryCgroup(`overload-bench-${process.pid}`, Number(values['limit-mib']) * MIB)
  const sidecar = startSidecarIn(cgroup, {
    PATH: process.env.PATH,
    GLIBC_TUNABLES: imageGlibcTunables(),
    AUTH_URL: `http://127.0.0.1:${standInPort}`,
    UPSTREAM_URL: `http://127.0.0.1:${upstreamPort}`,
    CLIENT_ID: 'demo-client',
    CLIENT_SECRET: 'Zm9v+YmFy/c2VjcmV0=',
    PORT: String(port),
    ADMIN_HOST: '127.0.0.1',
    ADMIN_PORT: String(adminPort)
  }, logDir)
  const alive = (): boolean => sidecar.child.exitCode === null && sidecar.child.signalCode === null
  const origin = `http://127.0.0.1:${port}`
  const results: LoadResult[] = []
  let plain = 'not made'
  let shed = ''
  let deathNote = ''
  try {
    await waitFor('the sidecar\'s first token', async () => await httpOk(`http://127.0.0.1:${adminPort}/readyz`), 30_000, 50)
    await sleep(1000)
    const idleMiB = mibOf(cgroup.usageBytes())
    process.stderr.write(`cgroup v${cgroup.version} ${cgroup.dir}, limit ${values['limit-mib']} MiB; sidecar ready, cgroup usage ${idleMiB} MiB; logs in ${runDir}\n`)

    const measured = async (load: string, callers: number, fn: () => Promise<Omit<LoadResult, 'load' | 'callers' | 'alive' | 'peakMiB' | 'sampledPeakMiB' | 'statAtPeak'>>): Promise<void> => {
      cgroup.resetPeak()
      const watch = watchPeak(cgroup)
      const r = await fn()
      const { peakSampled, statAtPeak } = watch.stop()
      let peak = peakSampled
      try { peak = Math.max(peak, cgroup.peakBytes()) } catch {}
      const result = { load, callers, alive: alive(), peakMiB: mibOf(peak), sampledPeakMiB: mibOf(peakSampled), statAtPeak, ...r }
      results.push(result)
      process.stderr.write(`${load}: ${JSON.stringify({ ...result, statAtPeak: statSummary(statAtPeak, peakSampled) })}\n`)
      await sleep(1000)
    }

    await measured('(a) wrk, 100 keep-alive callers, 8 s', NaN, async () => {
      const out = await runToEnd('wrk', 'wrk', ['-t2', '-c100', '-d8s', '--timeout', '10s', `${origin}${SMALL_PATH}`], logDir, 30_000)
      const w = parseWrk(out)
      const classes: Record<string, number> = { '2xx': w.requests - w.non2xx }
      if (w.non2xx > 0) classes['non-2xx'] = w.non2xx
      const errors: Record<string, number> = {}
      if (w.socketErrors > 0) errors.socket = w.socketErrors
      return { answered: w.requests, classes, errors, note: w.detail }
    })
    results[0]!.callers = results[0]!.answered + (results[0]!.errors.socket ?? 0)

    const order = JSON.stringify({ lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 1 }], note: '' })
    const body = order.replace('"note":""', `"note":"${'x'.repeat(POST_BYTES - order.length)}"`)
    await measured(`(b) ${POSTS} concurrent 60 KB POSTs`, POSTS, async () => {
      const r = await burst(origin, POSTS, { path: '/v2/store/orders', method: 'POST', body, headers: { 'content-type': 'application/json' } })
      return { ...r, note: JSON.stringify(r.statuses) }
    })

    upstream.deny(true)
    await measured(`(c) ${DENIED} concurrent calls answered 401 + 10 KB`, DENIED, async () => {
      const r = await burst(origin, DENIED, { path: SMALL_PATH, method: 'GET' })
      return { ...r, note: JSON.stringify(r.statuses) }
    })
    upstream.deny(false)

    await measured(`(d) ${SLOWLORIS} slowloris connections, ${SLOWLORIS_MS / 1000} s`, SLOWLORIS, async () => {
      const s = await slowloris(port, SLOWLORIS, SLOWLORIS_MS)
      const classes: Record<string, number> = {}
      for (const [status, n] of Object.entries(s.statusLines)) classes[classOf(Number(status))] = (classes[classOf(Number(status))] ?? 0) + n
      return {
        answered: Object.values(s.statusLines).reduce((a, b) => a + b, 0),
        classes,
        errors: s.connectErrors,
        note: `opened ${s.opened}, closed by the sidecar ${s.closedBySidecar}, status lines ${JSON.stringify(s.statusLines)}`
      }
    })
    plain = await plainCall(origin)
    try {
      const metrics = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text()
      shed = metrics.split('\n').filter((line) => line.startsWith('store_auth_proxy_overload_shed_total')).join('; ')
    } catch {}
  } finally {
    if (!alive()) {
      deathNote = `sidecar exited: code ${sidecar.child.exitCode}, signal ${sidecar.child.signalCode}; ${cgroup.events()}\n${dmesgOom()}`
    }
    await stop(sidecar, 'SIGKILL')
    cgroup.remove()
    await stop(standIn, 'SIGKILL')
    for (const spinner of spinners) await stop(spinner, 'SIGKILL')
    upstream.close()
  }

  const out = table(results, plain)
  const worst = results.reduce((a, b) => (b.peakMiB > a.peakMiB ? b : a))
  process.stdout.write(`${out}\nshed: ${shed || 'n/a'}\nmemory.stat at the highest sampled peak (${worst.sampledPeakMiB} MiB, ${worst.load}): ${statSummary(worst.statAtPeak, worst.sampledPeakMiB * MIB)}\n${deathNote}\n`)

  const failures: string[] = []
  if (deathNote !== '' || results.some((r) => !r.alive)) failures.push('the sidecar died')
  const [a, b, c] = results
  if (a === undefined || Object.keys(a.classes).some((k) => k !== '2xx') || Object.keys(a.errors).length > 0) failures.push('(a) was not entirely 2xx')
  for (const r of [b, c]) if (r === undefined || r.answered !== r.callers) failures.push(`${r?.load ?? '(b)/(c)'}: callers without a status line`)
  if (plain !== '200') failures.push(`the plain call after: ${plain}`)
  process.stdout.write(failures.length === 0 ? 'PASS\n' : `FAIL: ${failures.join('; ')}\n`)
  process.exit(failures.length === 0 ? 0 : 1)
}

await main()
