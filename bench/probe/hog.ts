// Private memory that the overload manager's live measure cannot see, made on purpose. Loaded
// into the sidecar (`NODE_OPTIONS=--import=<dist/bench/probe/hog.js>`, HOG_MIB=N; the bench's
// --hog-mib N does both), it starts a worker thread that holds N MiB of numbers in its own V8
// heap. process.memoryUsage() counts the main thread's isolate only, so the sidecar's private
// memory (RssAnon) grows by N MiB while its live memory (heap used + external) does not: the
// shape of the one bench run OOM-killed at 128 MiB, where memory outside live memory grew in
// (a) and (b) then began close to the limit with live memory low (bench/README.md).
import { Worker } from 'node:worker_threads'

const mib = Number(process.env.HOG_MIB ?? 0)
if (Number.isInteger(mib) && mib > 0) {
  // 128 Ki small integers per MiB: a packed array of them takes 8 bytes each.
  const code = `const held = []; for (let i = 0; i < ${mib}; i++) held.push(Array.from({ length: 131072 }, (_, j) => j)); setInterval(() => held.length, 1 << 30)`
  const worker = new Worker(code, { eval: true, resourceLimits: { maxOldGenerationSizeMb: mib * 2 + 32 } })
  worker.unref()
}
