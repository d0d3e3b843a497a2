// Loaded with --import into a process a test spawns: records every module the process
// resolves, ES modules and require() alike, Node's builtins included (module.registerHooks
// sees both loaders), and Node's own copy of undici (node:internal/deps/undici/undici, which no
// hook sees: from process.moduleLoadList), and writes them, one URL a line, to
// LOADED_MODULES_OUT as the process exits. test/startup/loaded-modules.test.ts reads the list.
import { writeFileSync } from 'node:fs'
import { registerHooks } from 'node:module'

const out = process.env.LOADED_MODULES_OUT
const loaded = new Set()
registerHooks({
  resolve (specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context)
    loaded.add(resolved.url)
    return resolved
  }
})
const internal = () => process.moduleLoadList.filter((m) => m.includes('deps/undici')).map((m) => `node:${m.split(' ').pop()}`)
if (out !== undefined) process.once('exit', () => { writeFileSync(out, [...loaded, ...internal()].join('\n') + '\n') })
