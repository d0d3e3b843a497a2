// The sidecar in one file, as the image runs it: esbuild bundles src/main.ts and every runtime
// dependency into dist/bundle/main.js (ESM), with its source map beside it (main.js.map, naming
// src/*.ts) and the dependencies' licence notices (main.js.LEGAL.txt). Node then reads and
// compiles one file instead of resolving some 60 packages file by file: it is ready with about
// a third less CPU than dist/main.js (docs/performance.md). Two levels below package.json, like
// dist/config/build-info.js, so that the version and dist/REVISION are read from the same
// relative paths.
//
//   npm run bundle [OUTFILE]     (esbuild reads src/ itself: npm run build is not needed)
//
// The source is erasable TypeScript only (tsconfig: verbatimModuleSyntax, erasableSyntaxOnly),
// so esbuild's type stripping emits what tsc emits. dist/ from tsc stays the tested build.
import { builtinModules, isBuiltin } from 'node:module'
import { build } from 'esbuild'

const OUTFILE = process.argv[2] ?? 'dist/bundle/main.js'

// src/ loads a few modules lazily through `createRequire(import.meta.url)` (Ajv on
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

// Node's builtins through require(), not `import`: the ESM facade of a builtin reads every
// export, and so runs its lazy getters (node:http's load Node's own copy of undici; so does
// npm undici, through globalThis.Headers). Each `import { x } from 'node:y'` becomes a
// property of `require('node:y')`, the same objects: 10 ms less CPU to ready (bench/README.md).
const builtinsByRequire = {
  name: 'builtins-by-require',
  setup (b) {
    b.onResolve({ filter: /^[\w:/]+$/ }, ({ path, kind }) => {
      if (kind !== 'import-statement' || !isBuiltin(path)) return undefined
      return { path, namespace: 'builtin-by-require' }
    })
    b.onLoad({ filter: /.*/, namespace: 'builtin-by-require' }, ({ path }) => ({
      contents: `module.exports = require(${JSON.stringify(path)})`, loader: 'js'
    }))
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
  // Whitespace only, names kept: stack traces still name functions (their lines through the
  // map). V8 keeps the whole source in memory: 2.4 instead of 3.6 MiB, and 5 MiB less
  // private memory at idle (bench/README.md, "Start-up").
  minifyWhitespace: true,
  metafile: true,
  logLevel: 'warning',
  plugins: [inlineLazyRequires, builtinsByRequire]
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
const bytes = Object.entries(result.metafile.outputs).find(([name]) => name.endsWith('.js'))?.[1].bytes ?? 0
process.stdout.write(`${OUTFILE}: ${(bytes / 2 ** 20).toFixed(1)} MiB, ${Object.keys(result.metafile.inputs).length} inputs\n`)
