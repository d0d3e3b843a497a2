// Lets Node's own type stripping run the TypeScript sources as they are written: an
// import of `./x.js` from a TypeScript file (NodeNext's spelling of a sibling `x.ts`,
// which tsc builds to `x.js`) resolves to `x.ts` when no `x.js` exists. tap loads it
// with `--import` (.taprc), so each test file starts without compiling anything.
import { registerHooks } from 'node:module'

registerHooks({
  resolve (specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context)
    } catch (error) {
      const fromTypeScript = context.parentURL?.endsWith('.ts') === true
      if (!fromTypeScript || error?.code !== 'ERR_MODULE_NOT_FOUND' || !/^\.{1,2}\/.*\.js$/.test(specifier)) throw error
      return nextResolve(specifier.slice(0, -'.js'.length) + '.ts', context)
    }
  }
})
