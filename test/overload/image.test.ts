// The image gives freed memory back to the OS: the runtime stage sets glibc's malloc tunables,
// and glibc (Debian 12's, the image's) takes each of them as written.
import { execFile } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { promisify } from 'node:util'
import t from 'tap'

const ROOT = new URL('../../', import.meta.url)
const LOADER = '/lib64/ld-linux-x86-64.so.2'
const EXPECTED = { 'glibc.malloc.mmap_threshold': 32768, 'glibc.malloc.trim_threshold': 131072, 'glibc.malloc.arena_max': 2 }

function runtimeTunables (): string | undefined {
  const dockerfile = readFileSync(new URL('Dockerfile', ROOT), 'utf8')
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '))
  return /^ENV GLIBC_TUNABLES=(\S+)$/m.exec(runtime)?.[1]
}

t.test('the runtime stage sets GLIBC_TUNABLES: mmap threshold 32 KiB, trim threshold 128 KiB, two arenas', async (t) => {
  const tunables = runtimeTunables()
  t.ok(tunables, 'ENV GLIBC_TUNABLES in the runtime stage')
  const set = Object.fromEntries((tunables ?? '').split(':').map((pair) => pair.split('=')).map(([name, value]) => [name, Number(value)]))
  t.same(set, EXPECTED)
})

t.test('glibc reads each tunable as written (a misspelt one would be ignored without a word)', { skip: existsSync(LOADER) ? false : 'no glibc loader here' }, async (t) => {
  const { stdout } = await promisify(execFile)(LOADER, ['--list-tunables'], { env: { GLIBC_TUNABLES: runtimeTunables() ?? '' } })
  for (const [name, value] of Object.entries(EXPECTED)) {
    t.match(stdout, new RegExp(`^${name.replaceAll('.', '\\.')}: 0x${value.toString(16)} `, 'm'), `${name} = ${value}`)
  }
})
