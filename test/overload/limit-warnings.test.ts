// What the memory limit cannot hold of a valid configuration is said at start and by
// check-config: a MEMORY_LIMIT_BYTES above the cgroup's, MAX_CONNECTIONS heads that do not fit,
// ADMIN_MAX_CONNECTIONS admin heads over their share (10,000 of them, once accepted without a
// word, OOM-killed a 128 MiB sidecar under 8,000 unfinished admin heads).
import t from 'tap'
import { ADMIN_HEADS_WATER, adminHeadsBytes, limitWarnings } from '../../src/overload/limit-warnings.js'
import type { MemoryLimit } from '../../src/overload/memory-limit.js'
import { CLIENT_ID, CLIENT_SECRET } from '../helpers/build.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'

const MiB = 1024 * 1024
const settings = (maxConnections: number, adminMaxConnections: number, maxHeaderBytes = 16_384) =>
  ({ listener: { maxHeaderBytes, maxHeaderCount: 100 }, overload: { maxConnections }, admin: { maxConnections: adminMaxConnections } })
const limit = (bytes: number): MemoryLimit => ({ bytes, source: 'cgroup v2' })

t.test('which settings the limit cannot hold', async (t) => {
  const cases: Array<[string, ReturnType<typeof settings>, MemoryLimit, RegExp[]]> = [
    ['the defaults in 128 MiB', settings(2000, 64), limit(128 * MiB), []],
    ['no limit known', settings(2000, 1000, 1024 * 1024), limit(0), []],
    ['1 MiB heads', settings(2000, 64, 1024 * 1024), limit(128 * MiB), [/^MAX_CONNECTIONS 2000 unfinished request heads of MAX_HEADER_BYTES 1048576 /]],
    ['1000 admin connections in 128 MiB', settings(2000, 1000), limit(128 * MiB), [/^ADMIN_MAX_CONNECTIONS 1000 unfinished admin heads \(24640000 bytes\) are over 10 % /]],
    ['1000 admin connections in 256 MiB', settings(2000, 1000), limit(256 * MiB), []],
    ['above the cgroup', settings(2000, 64), { ...limit(128 * MiB), settingAbove: 1024 * MiB }, [/^MEMORY_LIMIT_BYTES 1073741824 is above the cgroup v2 limit/]]
  ]
  for (const [name, given, memory, expected] of cases) {
    const warnings = limitWarnings(given, memory)
    t.equal(warnings.length, expected.length, name)
    expected.forEach((pattern, i) => t.match(warnings[i], pattern, name))
  }
  t.ok(adminHeadsBytes(64) < ADMIN_HEADS_WATER * 32 * MiB, 'the default admin bound fits the smallest limit allowed')
})

t.test('check-config says them on stderr, valid, exit 0', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const run = runMain(t, ['check-config'], {
    AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID, CLIENT_SECRET, MEMORY_LIMIT_BYTES: String(64 * MiB), ADMIN_MAX_CONNECTIONS: '1000'
  })
  t.equal(await run.exited, 0)
  t.match(run.stdout(), /^configuration is valid: /)
  t.match(run.stderr(), /^store-auth-proxy: warning: MAX_CONNECTIONS 2000 unfinished request heads /m)
  t.match(run.stderr(), /^store-auth-proxy: warning: ADMIN_MAX_CONNECTIONS 1000 unfinished admin heads /m)
})
