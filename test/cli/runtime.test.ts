// The Node.js the sidecar needs: one major, pinned the ecosystem's ways, and refused below it
// at start with one line and exit 1 (the version injected: no old Node.js is run here).
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { refuseUnsupportedRuntime, SUPPORTED_NODE_MAJOR, unsupportedRuntime } from '../../src/cli/runtime.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8')

t.test('Node.js 24 and later run; anything older is refused with the version and what to do', async (t) => {
  for (const version of ['v24.0.0', 'v24.21.0', 'v25.1.0', 'v30.0.0']) t.equal(unsupportedRuntime(version), undefined, version)
  for (const version of ['v23.11.0', 'v22.18.0', 'v20.20.2', 'v0.12.18']) {
    t.equal(unsupportedRuntime(version),
      `Node.js ${version} is not supported: store-auth-proxy needs Node.js 24 or later (in a checkout, \`nvm install\` or \`fnm use\` picks the one .nvmrc names)`,
      version)
  }
})

t.test('an unsupported runtime: one line on stderr, exit 1; a supported one: nothing', async (t) => {
  const written: string[] = []
  const exits: number[] = []
  const exit = (code: number): never => { exits.push(code); throw new Error('exited') }
  t.throws(() => { refuseUnsupportedRuntime('v20.20.2', { write: (line) => written.push(line) }, exit) }, /exited/)
  t.same(exits, [1])
  t.equal(written.length, 1)
  t.match(written[0], /^store-auth-proxy: Node\.js v20\.20\.2 is not supported: [^\n]*\n$/)

  written.length = 0
  refuseUnsupportedRuntime('v24.21.0', { write: (line) => written.push(line) }, exit)
  t.same(written, [])
  t.same(exits, [1])
})

t.test('.nvmrc, .node-version, package.json engines, .npmrc and the image all name Node.js 24', async (t) => {
  t.equal(SUPPORTED_NODE_MAJOR, 24)
  t.equal(read('.nvmrc').trim(), String(SUPPORTED_NODE_MAJOR))
  t.equal(read('.node-version').trim(), String(SUPPORTED_NODE_MAJOR))
  t.same((JSON.parse(read('package.json')) as { engines: unknown }).engines, { node: `>=${SUPPORTED_NODE_MAJOR}` })
  t.match(read('.npmrc'), /^engine-strict=true$/m, 'npm ci refuses an older Node.js')
  const dockerfile = read('Dockerfile')
  t.match(dockerfile, new RegExp(`^ARG BUILD_BASE=\\S+:${SUPPORTED_NODE_MAJOR}-bookworm-slim$`, 'm'))
  t.match(dockerfile, new RegExp(`^ARG RUNTIME_BASE=\\S+/nodejs${SUPPORTED_NODE_MAJOR}-debian12:nonroot$`, 'm'))
})
