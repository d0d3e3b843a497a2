// Where an idle process's memory goes, from inside it: loaded with --import into the
// sidecar (or any node program), it waits PROBE_AFTER_MS (default 3000, after the first
// token for a sidecar started by bench/probe/start.ts), runs a full GC when --expose-gc
// is on, and writes to PROBE_OUT one JSON document: /proc/self/status (RssAnon, RssFile),
// /proc/self/smaps_rollup, process.memoryUsage(), V8's heap spaces and, with
// PROBE_SNAPSHOT=1, a heap snapshot next to it (PROBE_OUT.heapsnapshot). It also counts the
// CommonJS modules loaded by then, and their source bytes, by package.
import { readFileSync, statSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import v8 from 'node:v8'

const out = process.env.PROBE_OUT
const after = Number(process.env.PROBE_AFTER_MS ?? 3000)

function kib (text: string): Record<string, number> {
  const r: Record<string, number> = {}
  for (const m of text.matchAll(/^(\w+):\s+(\d+) kB$/gm)) r[m[1] as string] = Number(m[2]) / 1024
  return r
}

/** CommonJS modules loaded so far (every dependency of the sidecar is CommonJS), by npm package. */
function modulesByPackage (): Record<string, { files: number, sourceKiB: number }> {
  const by: Record<string, { files: number, sourceKiB: number }> = {}
  for (const file of Object.keys(createRequire(import.meta.url).cache)) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file.slice(file.lastIndexOf('node_modules/')))
    const name = m?.[1] ?? '(not a package)'
    const entry = by[name] ??= { files: 0, sourceKiB: 0 }
    entry.files++
    try { entry.sourceKiB += statSync(file).size / 1024 } catch {}
  }
  return Object.fromEntries(Object.entries(by).sort((a, b) => b[1].sourceKiB - a[1].sourceKiB))
}

if (out !== undefined) {
  setTimeout(() => {
    const loadList = (process as unknown as { moduleLoadList: string[] }).moduleLoadList
    const gc = (globalThis as { gc?: () => void }).gc
    gc?.()
    const doc = {
      argv: process.execArgv,
      afterMs: after,
      gc: gc !== undefined,
      statusMiB: kib(readFileSync('/proc/self/status', 'utf8')),
      smapsRollupMiB: kib(readFileSync('/proc/self/smaps_rollup', 'utf8')),
      memoryUsageMiB: Object.fromEntries(Object.entries(process.memoryUsage()).map(([k, v]) => [k, v / 2 ** 20])),
      heapSpacesMiB: v8.getHeapSpaceStatistics().map((s) => ({
        space: s.space_name, size: s.space_size / 2 ** 20, used: s.space_used_size / 2 ** 20, physical: s.physical_space_size / 2 ** 20
      })),
      modules: modulesByPackage(),
      builtinsLoaded: loadList.length,
      nodeBundledUndici: loadList.some((m) => m.includes('deps/undici')),
      heapCodeStatisticsMiB: Object.fromEntries(Object.entries(v8.getHeapCodeStatistics()).map(([k, v]) => [k, Number(v) / 2 ** 20]))
    }
    writeFileSync(out, JSON.stringify(doc, null, 2) + '\n')
    if (process.env.PROBE_SNAPSHOT === '1') v8.writeHeapSnapshot(`${out}.heapsnapshot`)
  }, after).unref()
}
