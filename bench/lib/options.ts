// The command line of bench/run.ts: every option, its default, and what --smoke shortens.
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { shippedNodeFlags } from './shipped.js'

/** dist/bench, where the compiled harness and its helper scripts (paced.js, stream.js, upstream.js) are. */
export const BENCH_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..')
/** The repository (or the built copy) the harness belongs to. */
export const REPO = resolve(BENCH_DIR, '..', '..')
/** The one-file bundle `--bundle` measures (`npm run bundle`, scripts/bundle.mjs). */
export const BUNDLE = join(REPO, 'dist', 'bundle', 'main.js')
export const MIB = 1024 * 1024

export interface Sidecar {
  name: string
  /** A checkout holding dist/main.js, or a script run as it is (a floor, the bundle). */
  dir: string
  node: string | undefined
  /** Runs with NODE_COMPILE_CACHE set to a cache the harness fills first, as an image build would. */
  compileCache?: boolean
}

export interface Options {
  smoke: boolean
  rounds: number
  saturationS: number
  connections: number
  rate: number
  rateS: number
  rateWarmupS: number
  streamBytes: number
  streamRounds: number
  startups: number
  warmupS: number
  /** Seconds each target idles just before each measured run (on top of the others' turns). */
  idleS: number
  /** Seconds of unrecorded saturation just before each measured run: the target measured warm. */
  rewarmS: number
  workloads: Set<string>
  sidecars: Sidecar[]
  /** Where the bundle targets' compile cache is filled (default: the run's directory). */
  compileCache: string | undefined
  /** The floors (bench/floors/): node:http + undici, and Fastify + @fastify/http-proxy on defaults. */
  floors: Array<{ name: string, dir: string, node: string }>
  withFloors: boolean
  withNginx: boolean
  withDirect: boolean
  node: string
  pin: boolean
  proxyCore: number
  loadCore: number
  cpuProf: string | undefined
  out: string | undefined
  quietWaitS: number
  quietPct: number
  noisyPct: number
  retries: number
  rateNice: number
}

export const USAGE = `usage: node dist/bench/run.js [options]
  --smoke                 every workload for about a second, one round (CI)
  --rounds N              rounds of saturation and fixed rate (default 5)
  --saturation-s S        seconds per saturation run (default 5)
  --connections N         saturation connections (default 32)
  --rate R                fixed rate, requests/s (default 1000)
  --rate-s S              seconds per fixed-rate run, after a 1 s warm-up (default 10)
  --stream-mib N          size of the streamed body (default 100)
  --stream-rounds N       rounds of the streaming workload (default 3)
  --startups N            sidecar starts timed (default 5)
  --warmup-s S            unrecorded saturation run per target before measuring (default 3)
  --idle-s S              before each measured saturation or fixed-rate run, the target idles S s more
                          (default 0): a sidecar idle 10-20 s runs its memory-reducing collection
  --rewarm-s S            before each measured saturation or fixed-rate run, an unrecorded saturation
                          run of S s (whole seconds, at least 1; default 0: none): each run measured
                          warm, whatever the idle before it
  --workloads LIST        any of saturation,rate,stream,startup (default all)
  --sidecar NAME=DIR[@NODE]  a sidecar build to measure (repeatable; default sidecar=<this repo>);
                          DIR must hold a built dist/main.js: use it for A/B runs of a changed copy;
                          or a script instead of DIR, e.g. a floor: dist/bench/floors/node-floor.js;
                          @NODE runs this one with another node binary, and flags: @"/path/node --flag"
                          (without @NODE: the node flags of DIR's "npm start", as shipped)
  --bundle                also measure the bundle (dist/bundle/main.js, npm run bundle) as shipped in the
                          image: sidecar-bundle (no compile cache), sidecar-bundle-cache (Node's compile
                          cache filled first by scripts/fill-compile-cache.mjs, as an image build would)
                          and sidecar-bundle-cache-srcmaps (the same with --enable-source-maps)
  --compile-cache DIR     where the compile cache is filled (default <out>/compile-cache)
  --no-nginx, --no-direct, --no-floors  leave a target out (the floors: node-floor and fastify-floor,
                          bench/floors/, run with the same node and flags as a sidecar without @NODE)
  --node PATH             node binary (and flags) for the sidecars (default: the one running this script)
  --no-pin                do not pin with taskset
  --cpu-prof DIR          run the sidecars with --cpu-prof, profiles written to DIR at the end
  --out DIR               where results go (default bench/results/<timestamp>)
  --quiet-wait-s S        before each run, wait up to S s (default 60; smoke 0) for the machine's CPU
  --quiet-pct P           use by others to fall below P % of the machine (default 15)
  --noisy-pct P           a saturation or fixed-rate run during which others used more than P % of the
                          machine (default 25) is repeated, at most --retries times (default 2)
  --rate-nice N           nice value of the proxy, upstream and generator during fixed-rate runs
                          (default -10; 0 to leave priorities alone)`

export function parseOptions (argv: string[]): Options {
  const o: Options = {
    smoke: false,
    rounds: 5,
    saturationS: 5,
    connections: 32,
    rate: 1000,
    rateS: 10,
    rateWarmupS: 1,
    streamBytes: 100 * MIB,
    streamRounds: 3,
    startups: 5,
    warmupS: 3,
    idleS: 0,
    rewarmS: 0,
    workloads: new Set(['startup', 'saturation', 'rate', 'stream']),
    sidecars: [],
    compileCache: undefined,
    floors: [],
    withFloors: true,
    withNginx: true,
    withDirect: true,
    node: process.execPath,
    pin: true,
    proxyCore: 0,
    loadCore: 1,
    cpuProf: undefined,
    out: undefined,
    quietWaitS: 60,
    quietPct: 15,
    noisyPct: 25,
    retries: 2,
    rateNice: -10
  }
  const given = new Set<string>()
  let withBundle = false
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    const value = (): string => {
      const v = argv[++i]
      if (v === undefined) die(`${arg} needs a value\n${USAGE}`)
      return v
    }
    const number = (): number => {
      const v = Number(value())
      if (!Number.isFinite(v) || v <= 0) die(`${arg} needs a positive number`)
      return v
    }
    given.add(arg)
    switch (arg) {
      case '--smoke': o.smoke = true; break
      case '--rounds': o.rounds = number(); break
      case '--saturation-s': o.saturationS = number(); break
      case '--connections': o.connections = number(); break
      case '--rate': o.rate = number(); break
      case '--rate-s': o.rateS = number(); break
      case '--stream-mib': o.streamBytes = Math.round(number() * MIB); break
      case '--stream-rounds': o.streamRounds = number(); break
      case '--startups': o.startups = number(); break
      case '--warmup-s': o.warmupS = number(); break
      case '--idle-s': o.idleS = Number(value()); break
      case '--rewarm-s': o.rewarmS = Number(value()); break
      case '--workloads': o.workloads = new Set(value().split(',')); break
      case '--sidecar': {
        const m = /^([\w.-]+)=([^@]+)(?:@(.+))?$/.exec(value())
        if (m?.[1] === undefined || m[2] === undefined) die('--sidecar needs NAME=DIR or NAME=DIR@NODE')
        o.sidecars.push({ name: m[1], dir: resolve(m[2]), node: m[3] })
        break
      }
      case '--bundle': withBundle = true; break
      case '--compile-cache': o.compileCache = resolve(value()); break
      case '--no-nginx': o.withNginx = false; break
      case '--no-floors': o.withFloors = false; break
      case '--no-direct': o.withDirect = false; break
      case '--node': o.node = value(); break
      case '--no-pin': o.pin = false; break
      case '--cpu-prof': o.cpuProf = resolve(value()); break
      case '--out': o.out = resolve(value()); break
      case '--quiet-wait-s': o.quietWaitS = Number(value()); break
      case '--quiet-pct': o.quietPct = number(); break
      case '--noisy-pct': o.noisyPct = number(); break
      case '--retries': o.retries = Number(value()); break
      case '--rate-nice': o.rateNice = Number(value()); break
      case '--help': process.stdout.write(USAGE + '\n'); process.exit(0); break
      default: die(`unknown option ${arg}\n${USAGE}`)
    }
  }
  if (o.sidecars.length === 0) o.sidecars.push({ name: 'sidecar', dir: REPO, node: undefined })
  // Without @NODE, a sidecar runs as shipped: with the node flags of its `npm start`.
  for (const s of o.sidecars) s.node ??= [o.node, ...shippedNodeFlags(s.dir.endsWith('.js') ? REPO : s.dir)].join(' ')
  if (withBundle) {
    const dir = BUNDLE
    const node = [o.node, ...shippedNodeFlags(REPO)]
    o.sidecars.push({ name: 'sidecar-bundle', dir, node: node.join(' ') },
      { name: 'sidecar-bundle-cache', dir, node: node.join(' '), compileCache: true },
      { name: 'sidecar-bundle-cache-srcmaps', dir, node: [node[0], '--enable-source-maps', ...node.slice(1)].join(' '), compileCache: true })
  }
  // The floors run on the same node, with the same flags, as this repository's sidecar.
  if (o.withFloors) {
    const node = [o.node, ...shippedNodeFlags(REPO)].join(' ')
    for (const name of ['node-floor', 'fastify-floor']) o.floors.push({ name, dir: join(BENCH_DIR, 'floors', `${name}.js`), node })
  }
  if (o.smoke) {
    if (!given.has('--rounds')) o.rounds = 1
    if (!given.has('--saturation-s')) o.saturationS = 1
    if (!given.has('--rate-s')) o.rateS = 1
    o.rateWarmupS = 0.2
    if (!given.has('--stream-mib')) o.streamBytes = 16 * MIB
    if (!given.has('--stream-rounds')) o.streamRounds = 1
    if (!given.has('--startups')) o.startups = 1
    if (!given.has('--warmup-s')) o.warmupS = 1
    if (!given.has('--quiet-wait-s')) o.quietWaitS = 0
    if (!given.has('--retries')) o.retries = 0
  }
  for (const [name, v] of [['--idle-s', o.idleS], ['--rewarm-s', o.rewarmS]] as const) {
    if (!Number.isFinite(v) || v < 0) die(`${name} needs a number of seconds, 0 or more`)
  }
  for (const w of o.workloads) {
    if (!['startup', 'saturation', 'rate', 'stream'].includes(w)) die(`unknown workload ${w}`)
  }
  return o
}

export function die (message: string): never {
  process.stderr.write(`bench: ${message}\n`)
  process.exit(2)
}

export function log (message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`)
}
