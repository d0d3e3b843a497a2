// The built sidecar inside a memory cgroup of 128 MiB, driven through four loads one after
// the other in one process, to see whether it lives inside a pod's memory limit:
//   (a) wrk, 100 keep-alive callers, 8 s                         — entirely 2xx;
//   (b) 1000 concurrent 60 KB POSTs, each on its own connection  — every caller a status line;
//   (c) 1500 concurrent calls the upstream answers 401 with a 10 KB body (held back for the
//       replay, replayed once with a new token, answered 401 again) — every caller a status line;
//   (d) 3000 slowloris connections (a header line every second, 12 s) — the sidecar alive;
// then a plain call, answered 200 (the loads: lib/four-loads.ts, which the test
// test/overload/cgroup-loads.test.ts drives too, shorter); then the floods of lib/floods.ts
// (test/overload/cgroup-floods.test.ts drives them too), /livez polled throughout each:
//   (e) 12,000 unfinished heads on the admin port;
//   (f) 2,000 unfinished heads of 930 tiny header lines on the proxy port, and (f') as many
//       whole requests of 930 fields, each owed 431;
// then a plain call again. Needs root and a memory cgroup, about 70 s. Run it as root:
//
//   npm run bench:overload [-- --busy] [--limit-mib 128] [--no-manager] [--no-tunables] [--slowloris N] [--streamed N] [--hog-mib N] [--env NAME=VALUE]... [--floods-only]
//
// --busy keeps both cores busy (`node -e 'for(;;);'` twice) while it runs. --no-manager turns
// the overload manager off (MEMORY_LIMIT_BYTES=0, MAX_IN_FLIGHT_REQUESTS=0, MAX_CONNECTIONS=0);
// --no-tunables runs with glibc's malloc defaults (no GLIBC_TUNABLES); --slowloris N opens N
// slowloris connections in (d) instead of 3000; --streamed N adds (e), N concurrent POSTs of
// 1 MiB each streamed in 64 KiB writes, every caller owed a status line; --hog-mib N holds N MiB
// of private memory out of live memory's sight from the start (probe/hog.ts); --env NAME=VALUE sets one of the sidecar's
// settings (repeatable; e.g. MAX_CONNECTIONS=0 for no connection bound); --floods-only skips the four loads.
// Each flood's line adds the sidecar's CPU time and its event loop's longest delay (prom-client's
// nodejs_eventloop_lag_max_seconds, reset by a scrape before it). Otherwise the sidecar runs as the image runs it: `node` with `npm start`'s flags,
// GLIBC_TUNABLES as the Dockerfile sets it, the default configuration; the stand-in TI APIs (`node dist/main.js stand-in`)
// are the token endpoint, and the upstream is this script's own (200, or 401 with 10 KB).
// Exits 1 when the sidecar died, a caller of (b) or (c) got no status line, (a) had a
// non-2xx answer or a socket error, a /livez poll was not 200 within 1 s, a flood's connection
// hung, (f') was not 431 throughout, or a plain call was not answered 200.
import { execFileSync } from 'node:child_process'
import { mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parseArgs } from 'node:util'
import { driveFourLoads, failures, FULL_LOADS, imageGlibcTunables, inCgroup, sidecarEnv, startLoadUpstream, type LoadOutcome } from './lib/four-loads.js'
import { driveFloods, FLOOD_BOUNDS, floodFailures, FULL_FLOODS, type FloodOutcome } from './lib/floods.js'
import { createMemoryCgroup, watchPeak } from './lib/memory-cgroup.js'
import { MIB, REPO } from './lib/options.js'
import { freePort, httpOk, killChildrenOnExit, launch, runToEnd, sleep, stop, waitFor } from './lib/processes.js'
import { shippedNodeFlags } from './lib/shipped.js'

interface LoadResult extends LoadOutcome {
  alive: boolean
  peakMiB: number
  /** The highest usage sampled (every 20 ms), when memory.stat was read. */
  sampledPeakMiB: number
  statAtPeak: Record<string, number>
}

/** The process's CPU time so far, ms (utime + stime of /proc/PID/stat, at 100 ticks a second). */
function cpuMs (pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return NaN
  }
}

/** prom-client's longest event-loop delay since the last scrape, ms (the scrape resets it). */
async function eventLoopLagMaxMs (adminPort: number): Promise<number> {
  try {
    const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`, { signal: AbortSignal.timeout(5000) })).text()
    return Math.round(Number(/^nodejs_eventloop_lag_max_seconds (\S+)$/m.exec(text)?.[1] ?? NaN) * 1000)
  } catch {
    return NaN
  }
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

/** What the variants change: the overload manager's settings off, glibc's defaults, memory held out of live memory's sight. */
function variantEnv (values: { 'no-manager': boolean, 'no-tunables': boolean, 'hog-mib': string, env?: string[] }): NodeJS.ProcessEnv {
  const given: NodeJS.ProcessEnv = Object.fromEntries((values.env ?? []).map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]))
  const hog = Number(values['hog-mib'])
  return {
    ...(values['no-tunables'] ? {} : { GLIBC_TUNABLES: imageGlibcTunables(REPO) }),
    ...given,
    ...(hog > 0 ? { HOG_MIB: String(hog), NODE_OPTIONS: `--import=${join(REPO, 'dist', 'bench', 'probe', 'hog.js')} ${given.NODE_OPTIONS ?? ''}`.trim() } : {}),
    // MEMORY_LIMIT_BYTES=0: no memory watch; MAX_IN_FLIGHT_REQUESTS=0: no cap; MAX_CONNECTIONS=0: no bound.
    ...(values['no-manager'] ? { MEMORY_LIMIT_BYTES: '0', MAX_IN_FLIGHT_REQUESTS: '0', MAX_CONNECTIONS: '0' } : {})
  }
}

async function main (): Promise<void> {
  const { values } = parseArgs({
    options: {
      busy: { type: 'boolean', default: false },
      'limit-mib': { type: 'string', default: '128' },
      'no-manager': { type: 'boolean', default: false },
      'no-tunables': { type: 'boolean', default: false },
      slowloris: { type: 'string', default: String(FULL_LOADS.slowloris) },
      streamed: { type: 'string', default: '0' },
      'hog-mib': { type: 'string', default: '0' },
      env: { type: 'string', multiple: true },
      'floods-only': { type: 'boolean', default: false }
    }
  })
  killChildrenOnExit()
  const runDir = join('/tmp', `overload-cgroup-${new Date().toISOString().replace(/[:.]/g, '-')}`)
  mkdirSync(runDir, { recursive: true })
  const logDir = runDir
  const spinners = values.busy ? [0, 1].map((i) => launch(`busy-${i}`, process.execPath, ['-e', 'for(;;);'], { logDir })) : []
  const upstream = startLoadUpstream()
  const upstreamPort = await upstream.port
  const [standInPort, port, adminPort] = [await freePort(), await freePort(), await freePort()]
  const main = join(REPO, 'dist', 'main.js')
  const standIn = launch('stand-in', process.execPath, [main, 'stand-in'], { env: { PATH: process.env.PATH, STAND_IN_PORT: String(standInPort) }, logDir })
  await waitFor('the stand-in', async () => await httpOk(`http://127.0.0.1:${standInPort}/healthz`), 20_000, 50)

  const cgroup = createMemoryCgroup(`overload-bench-${process.pid}`, Number(values['limit-mib']) * MIB)
  const env = sidecarEnv({ standIn: standInPort, upstream: upstreamPort, proxy: port, admin: adminPort }, variantEnv(values))
  const [command, args] = inCgroup(cgroup.procsFile, [process.execPath, ...shippedNodeFlags(REPO), main, 'serve'])
  const sidecar = launch('sidecar', command, args, { env, logDir })
  const alive = (): boolean => sidecar.child.exitCode === null && sidecar.child.signalCode === null
  const results: LoadResult[] = []
  let plain = 'not made'
  let plainAfterFloods = 'not made'
  let fourLoads = 0
  let floods: FloodOutcome[] = []
  let shed = ''
  let deathNote = ''
  try {
    await waitFor('the sidecar\'s first token', async () => await httpOk(`http://127.0.0.1:${adminPort}/readyz`), 30_000, 50)
    await sleep(1000)
    const idleMiB = mibOf(cgroup.usageBytes())
    const variant = Object.entries(variantEnv(values)).map(([k, v]) => `${k}=${v ?? ''}`).join(' ') || 'glibc defaults'
    process.stderr.write(`cgroup v${cgroup.version} ${cgroup.dir}, limit ${values['limit-mib']} MiB; ${variant}; sidecar ready, cgroup usage ${idleMiB} MiB; logs in ${runDir}\n`)

    const measure = async <T extends LoadOutcome>(load: string, run: () => Promise<T>): Promise<T> => {
      cgroup.resetPeak()
      const watch = watchPeak(cgroup)
      const r = await run()
      const { peakSampled, statAtPeak } = watch.stop()
      let peak = peakSampled
      try { peak = Math.max(peak, cgroup.peakBytes()) } catch {}
      const result = { ...r, alive: alive(), peakMiB: mibOf(peak), sampledPeakMiB: mibOf(peakSampled), statAtPeak }
      results.push(result)
      process.stderr.write(`${load}: ${JSON.stringify({ ...result, statAtPeak: statSummary(statAtPeak, peakSampled) })}\n`)
      return r
    }
    if (!values['floods-only']) {
      const driven = await driveFourLoads({
        port,
        upstream,
        sizes: { ...FULL_LOADS, slowloris: Number(values.slowloris), streamed: Number(values.streamed) },
        runWrk: async (wrkArgs) => await runToEnd('wrk', 'wrk', wrkArgs, logDir, 30_000),
        measure
      })
      plain = driven.plain
      fourLoads = results.length
    }
    const flooded = await driveFloods({
      port,
      adminPort,
      upstream,
      sizes: FULL_FLOODS,
      ...FLOOD_BOUNDS,
      measure: async (load, run) => await measure(load, async () => {
        await eventLoopLagMaxMs(adminPort)
        const cpuBefore = cpuMs(sidecar.pid)
        const r = await run()
        const cpu = cpuMs(sidecar.pid) - cpuBefore
        return { ...r, note: `${r.note}; sidecar CPU ${cpu} ms, event loop delayed up to ${await eventLoopLagMaxMs(adminPort)} ms` }
      }),
      progress: (load) => { process.stderr.write(`${load}...\n`) }
    })
    floods = flooded.outcomes
    plainAfterFloods = flooded.plain
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

  const out = table(results, values['floods-only'] ? `not made (--floods-only); after the floods: ${plainAfterFloods}` : `${plain}; after the floods: ${plainAfterFloods}`)
  const worst = results.reduce((a, b) => (b.peakMiB > a.peakMiB ? b : a))
  process.stdout.write(`${out}\nshed: ${shed || 'n/a'}\nmemory.stat at the highest sampled peak (${worst.sampledPeakMiB} MiB, ${worst.load}): ${statSummary(worst.statAtPeak, worst.sampledPeakMiB * MIB)}\n${deathNote}\n`)

  const lived = deathNote === '' && results.every((r) => r.alive)
  const failed = [
    ...(values['floods-only'] ? [] : failures(results.slice(0, fourLoads), plain, lived)),
    ...floodFailures(floods, plainAfterFloods, lived)
  ]
  process.stdout.write(failed.length === 0 ? 'PASS\n' : `FAIL: ${failed.join('; ')}\n`)
  process.exit(failed.length === 0 ? 0 : 1)
}

await main()
