// Bundles the compiled sidecar (build/, from tsc) into the one file that runs in
// production: dist/main.js. Resolving and compiling some 60 packages file by file
// is most of Node's start-up work; one file starts in about half the time
// (bench/README.md), and the runtime image needs no node_modules.
import { build } from 'esbuild'

await build({
  entryPoints: ['build/main.js'],
  outfile: 'dist/main.js',
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  // Some bundled CommonJS packages require() Node's built-in modules; an ES module has no require.
  banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
  // The dependencies' licence notices go to dist/main.js.LEGAL.txt, shipped beside the bundle.
  legalComments: 'external',
  logLevel: 'warning'
})
