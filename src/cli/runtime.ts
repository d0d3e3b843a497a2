// The Node.js the sidecar runs on. package.json's "engines", .nvmrc, .node-version and the
// image's base name the same major (test/cli/runtime.test.ts), and `npm ci` refuses an older
// one (.npmrc: engine-strict). This is the last line: `node dist/main.js` on an older Node.js
// stops here, before anything that might half-work on it.
export const SUPPORTED_NODE_MAJOR = 24

/** Why this Node.js (`process.version`) cannot run the sidecar, in one line; undefined when it can. */
export function unsupportedRuntime (version: string): string | undefined {
  const major = Number.parseInt(version.replace(/^v/, ''), 10)
  if (major >= SUPPORTED_NODE_MAJOR) return undefined
  return `Node.js ${version} is not supported: store-auth-proxy needs Node.js ${SUPPORTED_NODE_MAJOR} or later` +
    ' (in a checkout, `nvm install` or `fnm use` picks the one .nvmrc names)'
}

/** Exits 1 with that one line on stderr when the runtime is unsupported. */
export function refuseUnsupportedRuntime (
  version: string, stderr: { write: (line: string) => unknown }, exit: (code: number) => never
): void {
  const why = unsupportedRuntime(version)
  if (why === undefined) return
  stderr.write(`store-auth-proxy: ${why}\n`)
  exit(1)
}
