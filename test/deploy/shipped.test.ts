// One way to run the sidecar outside the image that is what the image runs: `npm start` is the
// launcher (dist/launch.js), which replaces itself with node, the image's flags and its
// GLIBC_TUNABLES (src/cli/shipped.ts); the Dockerfile writes the same values out (no second
// exec at each start), and this file fails when the two differ.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { GLIBC_TUNABLES, NODE_FLAGS, shippedCommand } from '../../src/cli/shipped.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { MAIN, reapOnExit, SKIP_UNDER_MUTATION, staleBuild } from '../helpers/process.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const LAUNCHER = join(ROOT, 'dist/launch.js')
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8')

t.test('the Dockerfile runs node with the launcher\'s flags and GLIBC_TUNABLES', async (t) => {
  const runtime = read('Dockerfile').slice(read('Dockerfile').lastIndexOf('\nFROM '))
  t.equal(/^ENV GLIBC_TUNABLES=(\S+)$/m.exec(runtime)?.[1], GLIBC_TUNABLES)
  t.same(JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(runtime)?.[1] ?? 'null'), ['/nodejs/bin/node', ...NODE_FLAGS, '/app/dist/bundle/main.js'])
  t.equal((JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts.start, 'node dist/launch.js', 'npm start is the launcher')
})

t.test('the launcher\'s command: node, the flags, main and the arguments; the environment with GLIBC_TUNABLES', async (t) => {
  t.same(shippedCommand('/n', '/app/main.js', ['serve', '--x'], { A: '1', B: undefined, GLIBC_TUNABLES: 'other' }), {
    args: ['/n', ...NODE_FLAGS, '/app/main.js', 'serve', '--x'],
    env: { A: '1', GLIBC_TUNABLES }
  })
})

t.test('npm start: the same process becomes node with the flags and GLIBC_TUNABLES, and SIGTERM stops it cleanly', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const stale = staleBuild()
  if (stale !== '') throw new Error(stale)
  const standIn = await startStandIn(t)
  const child = spawn(process.execPath, [LAUNCHER, 'serve'], {
    env: { PATH: process.env.PATH ?? '', PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  reapOnExit(child)
  const pid = child.pid ?? 0
  let out = ''
  await new Promise<void>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk
      if (out.includes('store-auth-proxy started')) resolve()
    })
    child.once('exit', () => { reject(new Error(`the sidecar exited:\n${out}`)) })
  })
  // execve keeps the process id: the process the caller started is now the sidecar itself.
  t.same(readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').slice(0, -1), [process.execPath, ...NODE_FLAGS, MAIN, 'serve'])
  const environ = readFileSync(`/proc/${pid}/environ`, 'latin1')
  const tunables = environ.indexOf('\0GLIBC_TUNABLES=') + '\0GLIBC_TUNABLES='.length
  // glibc (2.36) parses the tunables in place as the process starts, writing a NUL over each
  // `:` it has read: seeing them so shows it read every one.
  t.equal(environ.slice(tunables, tunables + GLIBC_TUNABLES.length).replaceAll('\0', ':'), GLIBC_TUNABLES, 'GLIBC_TUNABLES, read by glibc as the process started')
  t.ok(environ.split('\0').includes(`AUTH_URL=${standIn.url}`), 'the rest of the environment, as given')
  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  t.same(await exited, [0, null], 'the signal reached the sidecar: it drained and exited 0')
})
