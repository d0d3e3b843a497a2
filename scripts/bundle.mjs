// The sidecar in one file: esbuild bundles src/main.ts and every runtime dependency into
// dist/main.bundle.js (ESM), with its source map beside it (dist/main.bundle.js.map, naming
// src/*.ts) and the dependencies' licence notices (dist/main.bundle.js.LEGAL.txt).
// Node then reads and compiles one file instead of resolving some 60 packages file by file,
// and the image fills Node's compile cache for it at build time (scripts/fill-compile-cache.mjs).
//
//   npm run bundle          (after or without npm run build: esbuild reads src/ itself)
//
// The source is erasable TypeScript only (tsconfig: verbatimModuleSyntax, erasableSyntaxOnly),
// so esbuild's type stripping emits what tsc emits. dist/ from tsc stays the tested build.
import { builtinModules } from 'node:module'
import { build } from 'esbuild'

const OUTFILE = 'dist/main.bundle.js'

// src/ loads a few modules lazily through `createRequire(import.meta.url)` (env-schema on
// first use, node:http for the healthcheck), which esbuild cannot follow: a call of a local
// `require` is not an import. This plugin drops that one declaration in src/, so the calls go
// to esbuild's own `require`: bundled CommonJS packages are inlined and still run only when
// called, and builtins go to the module-level `require` the banner below creates.
const CREATE_REQUIRE = 'const require = createRequire(import.meta.url)'
const inlineLazyRequires = {
  name: 'inline-lazy-requires',
  setup (b) {
    b.onLoad({ filter: /[\\/]src[\\/].*\.ts$/ }, async ({ path }) => {
      const { readFile } = await import('node:fs/promises')
      const source = await readFile(path, 'utf8')
      if (!source.includes(CREATE_REQUIRE)) return undefined
      return { contents: source.replace(CREATE_REQUIRE, ''), loader: 'ts' }
    })
  }
}

const result = await build({
  entryPoints: ['src/main.ts'],
  outfile: OUTFILE,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  // A shebang in src/main.ts becomes the bundle's first line; the banner follows it.
  // Bundled CommonJS packages require() Node's builtins; an ES module has no require.
  banner: { js: "import { createRequire as __bundleCreateRequire } from 'node:module'; const require = __bundleCreateRequire(import.meta.url);" },
  sourcemap: 'linked',
  // Stack traces name src/*.ts (with --enable-source-maps); the map carries no source text.
  sourcesContent: false,
  legalComments: 'external',
  metafile: true,
  logLevel: 'warning',
  plugins: [inlineLazyRequires]
})

// Self-contained or nothing: an import left outside the bundle would be looked up in
// node_modules at run time, and the image's bundle must not depend on it. Allowed: esbuild's
// own runtime, and ws's optional native addons, which ws require()s in a try and does
// without (they are not installed; ws comes with @fastify/http-proxy, for WebSocket
// proxying, which the sidecar does not enable).
const OPTIONAL = ['<runtime>', 'bufferutil', 'utf-8-validate']
const builtins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`), ...OPTIONAL])
const external = new Set()
for (const input of Object.values(result.metafile.inputs)) {
  for (const i of input.imports) if (i.external === true && !builtins.has(i.path)) external.add(i.path)
}
if (external.size > 0) {
  process.stderr.write(`bundle: left outside ${OUTFILE}: ${[...external].join(', ')}\n`)
  process.exit(1)
}
const bytes = result.metafile.outputs[OUTFILE]?.bytes ?? 0
process.stdout.write(`${OUTFILE}: ${(bytes / 2 ** 20).toFixed(1)} MiB, ${Object.keys(result.metafile.inputs).length} inputs\n`)
