// What each package costs to load, alone, in a fresh node process: import time, the
// private memory (RssAnon) it adds after a full GC, the V8 heap it adds, and whether it
// pulls in Node's own bundled undici (internal/deps/undici, ~750 KiB of source).
//
//   node --expose-gc dist/bench/probe/imports.js [--runs 5] [SPECIFIER ...]
//
// Without specifiers it measures the sidecar's dependencies and its own modules.
// Each figure is the median of --runs fresh processes; run it on Node 24 (the image's).
import { execFileSync } from 'node:child_process'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { median } from '../lib/stats.js'

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const args = process.argv.slice(2)
const runsAt = args.indexOf('--runs')
const runs = runsAt === -1 ? 5 : Number(args[runsAt + 1])
const given = args.filter((a, i) => !a.startsWith('--') && (runsAt === -1 || i !== runsAt + 1))
const specifiers = given.length > 0
  ? given
  : ['node:http', 'close-with-grace', 'pino', 'prom-client', 'ajv', 'undici', 'fastify', '@fastify/http-proxy',
      join(REPO, 'dist', 'config', 'load.js'), join(REPO, 'dist', 'logger.js'), join(REPO, 'dist', 'app.js')]

// The child: import one specifier between two readings; one JSON line.
const CHILD = `
const anon = () => Number(/RssAnon:\\s+(\\d+)/.exec(require('node:fs').readFileSync('/proc/self/status', 'utf8'))[1]) / 1024
global.gc(); const a0 = anon(); const h0 = process.memoryUsage().heapUsed; const m0 = process.moduleLoadList.length
const t0 = performance.now()
import(process.argv[1]).then(() => {
  const ms = performance.now() - t0
  global.gc()
  console.log(JSON.stringify({ ms, anonMiB: anon() - a0, heapMiB: (process.memoryUsage().heapUsed - h0) / 2 ** 20,
    builtins: process.moduleLoadList.length - m0, nodeUndici: process.moduleLoadList.some((m) => m.includes('deps/undici')) }))
})`

process.stdout.write(`node ${process.version}, median of ${runs} fresh processes each\n\n`)
process.stdout.write('| module | import ms | private (RssAnon) MiB | V8 heap MiB | loads Node\'s bundled undici |\n|---|---|---|---|---|\n')
for (const spec of specifiers) {
  const results: Array<{ ms: number, anonMiB: number, heapMiB: number, nodeUndici: boolean }> = []
  for (let i = 0; i < runs; i++) {
    const out = execFileSync(process.execPath, ['--expose-gc', '-e', CHILD, spec], { cwd: REPO, encoding: 'utf8' })
    results.push(JSON.parse(out.trim().split('\n').pop() ?? '{}'))
  }
  const name = spec.startsWith(REPO) ? spec.slice(REPO.length + 1) : spec
  const pick = (k: 'ms' | 'anonMiB' | 'heapMiB'): number => median(results.map((r) => r[k]))
  process.stdout.write(`| ${name} | ${pick('ms').toFixed(0)} | ${pick('anonMiB').toFixed(1)} | ${pick('heapMiB').toFixed(1)} | ${results[0]?.nodeUndici === true ? 'yes' : 'no'} |\n`)
}
