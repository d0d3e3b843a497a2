// How the sidecar is run in production: the node flags and the glibc malloc tunables the image
// runs it with. The one place they are written: the launcher (src/launch.ts, `npm start`) applies
// them outside the image, and a test holds the Dockerfile's ENV and ENTRYPOINT to them.

/**
 * A 4 MiB young-generation semi-space keeps RSS under load about 20 MiB lower at the same CPU
 * per request (bench/README.md). --expose-gc gives the overload manager and the idle collection
 * V8's gc() without a second context, which costs every request CPU (overload/memory-watch.ts).
 */
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4', '--expose-gc']

/**
 * Freed memory goes back to the OS. glibc's defaults keep what a burst freed: after four loads
 * RSS stayed at 218 MiB while V8 held 39 and external 4.5, ~120 MiB of freed memory kept by
 * malloc, counted against the pod's limit. Blocks of 32 KiB and more are mmap'd (returned on
 * free; setting it also stops glibc raising it after each free), the heap is trimmed once
 * 128 KiB are free at its top, and at most two arenas instead of up to 8 per core. In a 128 MiB
 * cgroup under bursts of 1000 60 KB POSTs the overload manager held 5 runs of 5 with them, and
 * was OOM-killed without them (docs/overload.md). glibc reads it once, as the process starts:
 * it must be in the environment node is started with.
 */
export const GLIBC_TUNABLES = 'glibc.malloc.mmap_threshold=32768:glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=2'

/** The command line and environment that run `main` (dist/main.js) as the image does, with `args`. */
export function shippedCommand (node: string, main: string, args: readonly string[], env: Readonly<Record<string, string | undefined>>): {
  args: string[], env: Record<string, string>
} {
  const defined = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined))
  return { args: [node, ...NODE_FLAGS, main, ...args], env: { ...defined, GLIBC_TUNABLES } }
}
