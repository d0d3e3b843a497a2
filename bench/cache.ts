// What a read-cache hit costs against a miss, in memory and from Redis, with the catalog-sized
// body (the stand-in's whole catalog, about 4 MB) and a small one (one product, under 1 KB):
// latency p50 / p99 as the client saw it, requests per second, and CPU per request of the
// sidecar (and of the stand-in and Redis) from /proc/<pid>/stat. One run, one client, the
// variants taking turns (A B C, then C B A, …); medians of the rounds, and of per-round
// differences and ratios against the miss.
//
//   npm run bench:cache                       (builds src/ and bench/, then this file)
//   npm run bench:cache -- --rounds 5 --seconds 3 --concurrency 1,8
//   npm run bench:cache -- --smoke            every variant once, briefly: checks the harness
//
// The variants, each its own sidecar (node dist/main.js, the shipped node flags), all with the
// rule GET /v2/store/products/** 100000/1s (a budget never spent):
//   miss          no cache=: every request is fetched from the stand-in (the upstream) and
//                 takes a budget point, the body streamed through: the cost of no cache.
//   memory hit    cache=1h, no Redis: every request is served from this sidecar's memory.
//   redis hit     cache=1h, two sidecars on one redis-server: a writer stored every answer
//                 beforehand; the reader, measured, has CACHE_MAX_BYTES at its minimum
//                 (64 KiB, and CACHE_ENTRY_MAX_BYTES with it, as the config requires), so it
//                 never keeps a copy of its own: the catalog is larger than its whole memory
//                 store and is read from Redis on every request; the small
//                 answers rotate over --keys query strings (?page=N, each its own key, far
//                 more than 64 KiB hold), so each is gone from its memory, evicted by the
//                 others, when it is asked again, and is read from Redis. Every measured
//                 request is one Redis read (GET of the entry, two PTTLs) plus the store into
//                 memory that a first read makes (with an eviction, for the small answers).
// The small body rotates over the same keys for every variant; the catalog is one key.
// Every answer is checked: status 200, the body byte for byte as the stand-in gave it,
// Cache-Status (none for the miss; `hit` with a ttl) and Age (age + ttl = the rule's 3600 s).
// With --burst N, at the end: N callers at once on a sidecar just started (CACHE_MAX_BYTES as
// shipped) ask for the catalog the writer stored in Redis: how each was answered.
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus } from 'node:os'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { Pool } from 'undici'
import { closedLoop, type Answer, type ClosedLoopRun } from './lib/closed-loop.js'
import { cacheReport, type BurstRun, type CacheResults, type CacheRun, type SidecarMemory } from './lib/cache-report.js'
import { die, log, REPO } from './lib/options.js'
import { coreTicks, cpuSeconds, CLK_TCK, rssAnonMiB, rssMiB, setPriorityAll } from './lib/proc.js'
import { freePort, httpOk, killAll, killChildrenOnExit, launch, sleep, stop, waitFor, type Spawned } from './lib/processes.js'
import { startRedis, type BenchRedis } from './lib/redis.js'
import { shippedNodeFlags } from './lib/shipped.js'
import { f } from './lib/stats.js'

killChildrenOnExit()

const CLIENT = { id: 'bench-client', secret: 'bench-secret' }
const RULE = 'GET /v2/store/products/** 100000/1s'
const FRESH_S = 3600
const CATALOG_PATH = '/v2/store/products/catalog'
const SMALL_PATH = '/v2/store/products/LM358BIDR'
/** The reader's memory store, as small as CACHE_MAX_BYTES allows: it keeps no copy worth the name. */
const READER_CACHE_MAX_BYTES = 64 * 1024

const USAGE = `usage: node dist/bench/cache.js [options]
  --smoke                 one round of 0.3 s per variant, one connection, no nice (checks the harness)
  --rounds N              rounds (default 3)
  --seconds S             seconds per run (default 3)
  --concurrency LIST      connections of the closed-loop client, each a workload (default 1,8)
  --bodies LIST           catalog,small (default both)
  --keys N                query strings the small body rotates over (default 256)
  --redis-timeout-ms MS   RATE_LIMIT_REDIS_TIMEOUT_MS of the two Redis sidecars (default: theirs, 200)
  --burst N               at the end, N callers at once ask a sidecar just started for the catalog
                          stored in Redis: how many are answered from the cache (default 0: not run)
  --nice N                nice value of every process of the run while measuring (default -10; smoke 0)
  --no-pin                do not pin with taskset
  --out DIR               where results go (default bench/results/cache-<timestamp>)`

interface Options {
  rounds: number
  seconds: number
  concurrency: number[]
  bodies: string[]
  keys: number
  redisTimeoutMs: string | undefined
  burst: number
  smoke: boolean
  pin: boolean
  nice: number
  out: string | undefined
}

function options (argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      seconds: { type: 'string' },
      concurrency: { type: 'string' },
      bodies: { type: 'string' },
      keys: { type: 'string' },
      'redis-timeout-ms': { type: 'string' },
      burst: { type: 'string' },
      help: { type: 'boolean', default: false },
      smoke: { type: 'boolean', default: false },
      'no-pin': { type: 'boolean', default: false },
      nice: { type: 'string' },
      out: { type: 'string' }
    }
  })
  if (values.help === true) {
    process.stdout.write(USAGE + '\n')
    process.exit(0)
  }
  const smoke = values.smoke === true
  const positive = (name: string, text: string | undefined, fallback: number): number => {
    const v = text === undefined ? fallback : Number(text)
    if (!(v > 0)) die(`--${name} needs a positive number`)
    return v
  }
  const concurrency = (values.concurrency ?? (smoke ? '1' : '1,8')).split(',').map((c) => positive('concurrency', c, 1))
  const bodies = (values.bodies ?? 'catalog,small').split(',')
  if (bodies.some((b) => b !== 'catalog' && b !== 'small')) die(`--bodies: catalog and/or small\n${USAGE}`)
  return {
    rounds: positive('rounds', values.rounds, smoke ? 1 : 3),
    seconds: positive('seconds', values.seconds, smoke ? 0.3 : 3),
    concurrency,
    bodies,
    keys: positive('keys', values.keys, 256),
    redisTimeoutMs: values['redis-timeout-ms'],
    burst: values.burst === undefined ? 0 : positive('burst', values.burst, 0),
    smoke,
    pin: values['no-pin'] !== true && cpus().length >= 2,
    nice: values.nice === undefined ? (smoke ? 0 : -10) : Number(values.nice),
    out: values.out
  }
}

interface Sidecar { name: string, port: number, admin: number, process: Spawned }

async function startSidecar (name: string, logDir: string, standInPort: number, env: Record<string, string>, core: number | undefined): Promise<Sidecar> {
  const [port, admin] = [await freePort(), await freePort()]
  const p = launch(name, process.execPath, [...shippedNodeFlags(REPO), join(REPO, 'dist', 'main.js')], {
    env: {
      PATH: process.env.PATH,
      AUTH_URL: `http://127.0.0.1:${standInPort}`,
      UPSTREAM_URL: `http://127.0.0.1:${standInPort}`,
      CLIENT_ID: CLIENT.id,
      CLIENT_SECRET: CLIENT.secret,
      PORT: String(port),
      ADMIN_PORT: String(admin),
      ADMIN_HOST: '127.0.0.1',
      ...env
    },
    logDir,
    ...(core === undefined ? {} : { core })
  })
  await Promise.race([
    waitFor(`${name} readiness`, () => httpOk(`http://127.0.0.1:${admin}/readyz`), 30_000, 50),
    p.exited.then((code) => { throw new Error(`${name} exited (${String(code)}): see ${join(logDir, `${name}.log`)}`) })
  ])
  return { name, port, admin, process: p }
}

/** One GET, whole. */
async function get (port: number, path: string): Promise<Answer> {
  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 1 })
  try {
    const { statusCode, headers, body } = await pool.request({ method: 'GET', path })
    return { statusCode, headers, body: Buffer.from(await body.arrayBuffer()) }
  } finally {
    await pool.close()
  }
}

/** Why an answer is not what the variant promises, or undefined. */
function checker (reference: Buffer, hit: boolean): (a: Answer) => string | undefined {
  return ({ statusCode, headers, body }) => {
    if (statusCode !== 200) return `status ${statusCode}`
    if (!body.equals(reference)) return `body of ${body.length} bytes differs from the stand-in's ${reference.length}`
    const status = headers['cache-status']
    if (!hit) return status === undefined ? undefined : `Cache-Status on a rule without cache=: ${String(status)}`
    const m = /^store-auth-proxy; hit; ttl=(-?\d+)$/.exec(String(status))
    if (m === null) return `Cache-Status ${String(status)}, not a hit`
    const age = Number(headers.age)
    if (!Number.isInteger(age) || age < 0) return `Age ${String(headers.age)}`
    if (Math.abs(age + Number(m[1]) - FRESH_S) > 1) return `Age ${age} and ttl ${m[1]} do not add up to cache=${FRESH_S}s`
    return undefined
  }
}

interface Variant { name: string, sidecar: Sidecar, hit: boolean }
interface Body { name: 'catalog' | 'small', path: (n: number) => string, reference: Buffer }

/** The other load: busy time of the machine not spent by any process of this run. */
function machine (pids: number[]): { busy: number, total: number, ours: number } {
  const cores = coreTicks()
  const usage = process.cpuUsage()
  return {
    busy: cores.reduce((a, c) => a + c.busy, 0) / CLK_TCK,
    total: cores.reduce((a, c) => a + c.total, 0) / CLK_TCK,
    ours: pids.reduce((a, pid) => a + (cpuSeconds(pid) ?? 0), 0) + (usage.user + usage.system) / 1e6
  }
}

async function measure (v: Variant, body: Body, concurrency: number, seconds: number, round: number,
  pids: { standIn: number, redis: number, all: number[] }): Promise<CacheRun> {
  const cpu = (): number[] => [cpuSeconds(v.sidecar.process.pid) ?? NaN, cpuSeconds(pids.standIn) ?? NaN, cpuSeconds(pids.redis) ?? NaN]
  const [c0, m0] = [cpu(), machine(pids.all)]
  const r: ClosedLoopRun = await closedLoop({
    origin: `http://127.0.0.1:${v.sidecar.port}`, path: body.path, seconds, concurrency, check: checker(body.reference, v.hit)
  })
  const [c1, m1] = [cpu(), machine(pids.all)]
  const perReq = (i: number): number => ((c1[i] ?? NaN) - (c0[i] ?? NaN)) / r.requests * 1e6
  const wall = m1.total - m0.total
  return {
    target: v.name,
    body: body.name,
    concurrency,
    round,
    ...r,
    sidecarCpuUs: perReq(0),
    standInCpuUs: perReq(1),
    redisCpuUs: perReq(2),
    otherLoadPct: wall > 0 ? Math.max(0, (m1.busy - m0.busy - (m1.ours - m0.ours)) / wall * 100) : NaN
  }
}

async function memoryOf (s: Sidecar): Promise<SidecarMemory> {
  const status = await (await fetch(`http://127.0.0.1:${s.admin}/status`)).json() as { cache?: { bytes: number, entries: unknown[] } }
  const metrics = await (await fetch(`http://127.0.0.1:${s.admin}/metrics`)).text()
  const counted = metrics.split('\n').filter((l) => /^store_auth_proxy_cache_(requests|evictions|stores|redis_errors)_total/.test(l))
  return {
    name: s.name,
    rssMiB: rssMiB(s.process.pid) ?? NaN,
    rssAnonMiB: rssAnonMiB(s.process.pid) ?? NaN,
    cacheBytes: status.cache?.bytes ?? 0,
    cacheEntries: status.cache?.entries.length ?? 0,
    counters: counted.map((l) => l.replace('store_auth_proxy_', ''))
  }
}

/**
 * One answer fetched and stored by `s`. On a busy machine a budget check in Redis can take
 * longer than RATE_LIMIT_REDIS_TIMEOUT_MS: the sidecar then refuses with a 429 until Redis
 * answers again (its share of the fleet's budget, without RATE_LIMIT_FLEET_SIZE, is nothing).
 * So a 429 is asked again, a few times.
 */
async function store (s: Sidecar, path: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const a = await get(s.port, path)
    if (/; stored;/.test(String(a.headers['cache-status']))) return
    const why = `${a.statusCode} ${String(a.headers['cache-status'] ?? '')} ${a.statusCode === 200 ? '' : a.body.toString().slice(0, 300)}`
    if (a.statusCode !== 429 || attempt === 5) throw new Error(`${s.name} did not store ${path}: ${why}`)
    log(`  ${s.name} did not store ${path} (${why}): asked again in 1 s`)
    await sleep(1000)
  }
}

/** Each variant's answers stored where it keeps them (the writer's go to Redis); the references fetched through the miss. */
async function prime (miss: Sidecar, storers: Sidecar[], redis: BenchRedis, keys: number): Promise<Body[]> {
  const catalog = await get(miss.port, CATALOG_PATH)
  const small = await get(miss.port, SMALL_PATH)
  if (catalog.statusCode !== 200 || small.statusCode !== 200) throw new Error(`the stand-in answered ${catalog.statusCode} / ${small.statusCode}`)
  const bodies: Body[] = [
    { name: 'catalog', path: () => CATALOG_PATH, reference: catalog.body },
    { name: 'small', path: (n) => `${SMALL_PATH}?page=${n % keys}`, reference: small.body }
  ]
  for (const s of storers) {
    for (const b of bodies) {
      for (let n = 0; n < (b.name === 'catalog' ? 1 : keys); n++) {
        await store(s, b.path(n))
      }
    }
  }
  // The writer's stores to Redis are sent after its answers: wait for all of them.
  await waitFor('the entries in Redis', async () => ((await redis.command('KEYS', '*cache:*')) as string[]).length >= keys + 1, 10_000, 50)
  return bodies
}

/**
 * `n` callers at once ask a sidecar just started, with no copy of its own (CACHE_MAX_BYTES as
 * shipped), for the catalog the writer stored in Redis: how each was answered, and how many
 * GETs of the entry (and budget checks) Redis served meanwhile.
 */
async function burst (n: number, reference: Buffer, at: { logDir: string, standInPort: number, env: Record<string, string>, core: number | undefined },
  redis: BenchRedis): Promise<BurstRun> {
  const s = await startSidecar('redis-burst', at.logDir, at.standInPort, at.env, at.core)
  await redis.command('CONFIG', 'RESETSTAT')
  const pool = new Pool(`http://127.0.0.1:${s.port}`, { connections: n })
  const started = performance.now()
  const answers = await Promise.all(Array.from({ length: n }, async () => {
    const { statusCode, headers, body } = await pool.request({ method: 'GET', path: CATALOG_PATH })
    const bytes = Buffer.from(await body.arrayBuffer())
    const status = String(headers['cache-status'] ?? 'no Cache-Status').replace(/; ttl=-?\d+/, '')
    // A refusal's message, its numbers (retry after N s) left out so that alike ones count together.
    const said = statusCode === 200 ? (bytes.equals(reference) ? '' : ' (body differs)') : ` ${bytes.toString().slice(0, 200).replace(/\d+/g, 'N')}`
    return `${statusCode} ${status}${said}`
  }))
  const ms = performance.now() - started
  await pool.close()
  const stats = String(await redis.command('INFO', 'commandstats'))
  const { counters } = await memoryOf(s)
  await stop(s.process)
  const outcomes: Record<string, number> = {}
  for (const a of answers) outcomes[a] = (outcomes[a] ?? 0) + 1
  const calls = (command: string): number => Number(new RegExp(`^cmdstat_${command}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
  return { callers: n, ms, outcomes, redisGets: calls('get'), budgetChecks: calls('evalsha'), counters }
}

async function main (): Promise<void> {
  const o = options(process.argv.slice(2))
  if (spawnSync('redis-server', ['--version']).error !== undefined) die('missing: redis-server. Install with: apt-get install -y redis-server')
  const started = performance.now()
  const stamp = new Date().toISOString().replace(/[:.]/g, '-').slice(0, 19)
  const runDir = o.out ?? join(REPO, 'bench', 'results', `cache-${o.smoke ? 'smoke-' : ''}${stamp}`)
  const logDir = join(runDir, 'logs')
  mkdirSync(logDir, { recursive: true })
  // As bench/run.ts: the sidecars on core 0; the client (this process), the stand-in and Redis on core 1.
  const [proxyCore, loadCore] = o.pin ? [0, 1] : [undefined, undefined]
  if (loadCore !== undefined) spawnSync('taskset', ['-a', '-p', '-c', String(loadCore), String(process.pid)], { stdio: 'ignore' })
  log(`results in ${runDir}`)
  const { standIn, standInPort, redis, sidecars, shared } = await startAll(o, logDir, proxyCore, loadCore)
  const [miss, memory, writer, reader] = sidecars
  await sleep(1000)
  const idle = await Promise.all(sidecars.map(memoryOf))

  const bodies = (await prime(miss, [memory, writer], redis, o.keys)).filter((b) => o.bodies.includes(b.name))
  log(`primed: ${bodies.map((b) => `${b.name} ${b.reference.length} bytes`).join(', ')} (the small one under ${o.keys} keys)`)
  const variants: Variant[] = [
    { name: 'miss', sidecar: miss, hit: false },
    { name: 'memory hit', sidecar: memory, hit: true },
    { name: 'redis hit', sidecar: reader, hit: true }
  ]
  const pids = { standIn: standIn.pid, redis: redis.process.pid, all: [standIn.pid, redis.process.pid, ...sidecars.map((s) => s.process.pid)] }
  const runs = await measureAll(o, variants, bodies, pids)
  const end = await Promise.all(sidecars.map(memoryOf))
  const catalog = bodies.find((b) => b.name === 'catalog')
  const burstRun = o.burst > 0 && catalog !== undefined
    ? await burst(o.burst, catalog.reference, { logDir, standInPort, env: shared, core: proxyCore }, redis)
    : undefined

  const results: CacheResults = {
    machine: {
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      node: `${process.version} ${shippedNodeFlags(REPO).join(' ')}`,
      redis: spawnSync('redis-server', ['--version'], { encoding: 'utf8' }).stdout.trim()
    },
    options: { ...o, argv: process.argv.slice(2), pinning: o.pin ? 'sidecars on core 0; client, stand-in and redis-server on core 1' : 'none' },
    bodies: Object.fromEntries(bodies.map((b) => [b.name, b.reference.length])),
    runs,
    idle,
    end,
    ...(burstRun === undefined ? {} : { burst: burstRun })
  }
  for (const s of sidecars) await stop(s.process)
  await redis.stop()
  await stop(standIn)
  write(results, runDir, (performance.now() - started) / 1000)
}

/** The stand-in, redis-server, and the four sidecars, one at a time: four starting together on one busy core time out their first Redis connection. */
async function startAll (o: Options, logDir: string, proxyCore: number | undefined, loadCore: number | undefined) {
  const standInPort = await freePort()
  const standIn = launch('stand-in', process.execPath, [join(REPO, 'dist', 'main.js'), 'stand-in'], {
    env: { PATH: process.env.PATH, STAND_IN_PORT: String(standInPort), STAND_IN_CLIENT_ID: CLIENT.id, STAND_IN_CLIENT_SECRET: CLIENT.secret, LOG_LEVEL: 'warn' },
    logDir,
    ...(loadCore === undefined ? {} : { core: loadCore })
  })
  await waitFor('the stand-in', () => httpOk(`http://127.0.0.1:${standInPort}/healthz`), 30_000, 50)
  const redis = await startRedis(logDir, loadCore)
  const cached = `${RULE} cache=1h`
  const shared = { RATE_LIMITS: cached, RATE_LIMIT_REDIS_URL: redis.url, ...(o.redisTimeoutMs === undefined ? {} : { RATE_LIMIT_REDIS_TIMEOUT_MS: o.redisTimeoutMs }) }
  const reading = { CACHE_MAX_BYTES: String(READER_CACHE_MAX_BYTES), CACHE_ENTRY_MAX_BYTES: String(READER_CACHE_MAX_BYTES) }
  const sidecars: Sidecar[] = []
  for (const [name, env] of [['miss', { RATE_LIMITS: RULE }], ['memory', { RATE_LIMITS: cached }], ['redis-writer', shared], ['redis-reader', { ...shared, ...reading }]] as const) {
    sidecars.push(await startSidecar(name, logDir, standInPort, env, proxyCore))
  }
  return { standIn, standInPort, redis, sidecars: sidecars as [Sidecar, Sidecar, Sidecar, Sidecar], shared }
}

function write (results: CacheResults, runDir: string, elapsedS: number): void {
  const table = cacheReport(results)
  writeFileSync(join(runDir, 'results.json'), JSON.stringify(results, null, 2) + '\n')
  writeFileSync(join(runDir, 'results.md'), `command: ${['npm run bench:cache --', ...process.argv.slice(2)].join(' ')}\n\n${table}\nrun took ${f(elapsedS, 0)} s\n`)
  process.stdout.write(`\n${table}\nrun took ${f(elapsedS, 0)} s; results in ${runDir}\n`)
  const failed = results.runs.filter((r) => r.failures > 0)
  if (failed.length > 0) {
    log(`${failed.length} run(s) had wrong answers: ${failed.map((r) => `${r.target} ${r.body}: ${r.firstFailure ?? '?'}`).join('; ')}`)
    process.exitCode = 1
  }
}

/** A warm-up of each variant, then the rounds: each body, each concurrency, the variants taking turns. */
async function measureAll (o: Options, variants: Variant[], bodies: Body[], pids: { standIn: number, redis: number, all: number[] }): Promise<CacheRun[]> {
  for (const b of bodies) for (const v of variants) await measure(v, b, Math.max(...o.concurrency), Math.min(1, o.seconds), 0, pids)
  if (o.nice !== 0) for (const pid of [...pids.all, process.pid]) setPriorityAll(pid, o.nice)
  const runs: CacheRun[] = []
  for (const b of bodies) {
    for (const c of o.concurrency) {
      for (let round = 1; round <= o.rounds; round++) {
        for (const v of round % 2 === 1 ? variants : [...variants].reverse()) {
          const r = await measure(v, b, c, o.seconds, round, pids)
          runs.push(r)
          log(`${b.name} c=${c} round ${round} ${v.name}: ${f(r.rps, 0)} req/s, p50 ${f(r.p50Ms, 3)} p99 ${f(r.p99Ms, 3)} ms, ` +
            `sidecar ${f(r.sidecarCpuUs)} µs/req, stand-in ${f(r.standInCpuUs)}, redis ${f(r.redisCpuUs)}, other load ${f(r.otherLoadPct, 0)} %` +
            (r.failures > 0 ? `, ${r.failures} wrong: ${r.firstFailure ?? ''}` : ''))
        }
      }
    }
  }
  return runs
}

await main().catch((err: unknown) => {
  log(`failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`)
  killAll()
  process.exit(1)
})
