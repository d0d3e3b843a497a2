// npm undici reads `globalThis.Headers` as it loads (lib/web/cookies/index.js, a brand check
// for its cookie helpers). In Node.js 24 that global is lazy: its first read loads Node's own
// copy of undici (internal/deps/undici, 750 KiB of source held in memory), which the sidecar
// never calls: 1.2 MiB of private memory at idle and some 10 ms of start-up
// (docs/performance.md). Deleting the global does not load it.

/**
 * Loads npm undici without Node's copy: the lazy global removed first, then npm undici's
 * Headers (the same WHATWG class) put in its place, so that `Headers` stays defined.
 */
export async function loadUndici (): Promise<void> {
  const lazy = globalThis as { Headers?: unknown }
  delete lazy.Headers
  const { Headers } = await import('undici')
  Object.defineProperty(globalThis, 'Headers', { value: Headers, writable: true, configurable: true, enumerable: false })
}
