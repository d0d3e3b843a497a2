// The memory limit from the process's own cgroup, as the files read in each layout say it,
// and MEMORY_LIMIT_BYTES over it. Fixture contents only: no real cgroup is needed.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/config/parse-env.js'
import { candidateDirs, cgroupMemoryLimit, memoryLimit, memoryLimitWarnings, parseLimitValue, parseProcCgroup, readPrivateBytes, readUsageBytes, type ReadSystemFile } from '../../src/overload/memory-limit.js'

const MiB = 1024 * 1024
const files = (contents: Record<string, string>): ReadSystemFile => (path) => contents[path]

// As this machine (cgroup v1, systemd) and a Kubernetes node (cgroup v2, with a cgroup namespace) write it.
const V1_PROC = '12:pids:/user.slice\n11:cpu,cpuacct:/user.slice\n4:memory:/user.slice/session-1.scope\n0::/user.slice/session-1.scope\n'
const V2_PROC = '0::/\n'

t.test('/proc/self/cgroup: the v2 group and the v1 memory group', async (t) => {
  t.same(parseProcCgroup(V1_PROC), { v2: '/user.slice/session-1.scope', v1Memory: '/user.slice/session-1.scope' })
  t.same(parseProcCgroup(V2_PROC), { v2: '/' })
  t.same(parseProcCgroup('5:cpuset,memory:/kubepods/pod1/abc\n'), { v1Memory: '/kubepods/pod1/abc' }, 'memory among other controllers')
  t.same(parseProcCgroup('3:name=systemd:/a:b\n'), {}, 'a named hierarchy is not the memory one')
  t.same(parseProcCgroup(''), {})
})

t.test('limit values: bytes, or none for "max", a huge v1 value and anything unreadable', async (t) => {
  const cases: Array<[string | undefined, number | undefined]> = [
    ['134217728\n', 128 * MiB],
    ['max\n', undefined],
    ['9223372036854771712\n', undefined],
    ['0\n', undefined],
    ['-1', undefined],
    ['12ab', undefined],
    ['', undefined],
    [undefined, undefined]
  ]
  for (const [text, bytes] of cases) t.equal(parseLimitValue(text), bytes, JSON.stringify(text))
})

t.test('candidates: the group, each ancestor, and the mount\'s root', async (t) => {
  t.same(candidateDirs('/sys/fs/cgroup', '/kubepods/pod1/abc'),
    ['/sys/fs/cgroup/kubepods/pod1/abc', '/sys/fs/cgroup/kubepods/pod1', '/sys/fs/cgroup/kubepods', '/sys/fs/cgroup'])
  t.same(candidateDirs('/sys/fs/cgroup', '/'), ['/sys/fs/cgroup'])
  t.same(candidateDirs('/sys/fs/cgroup', '/../../etc'), ['/sys/fs/cgroup/etc', '/sys/fs/cgroup'], 'never above the mount')
})

t.test('cgroup v2: memory.max of the own group', async (t) => {
  const read = files({ '/proc/self/cgroup': V2_PROC, '/sys/fs/cgroup/memory.max': '134217728\n' })
  t.same(cgroupMemoryLimit(read), { bytes: 128 * MiB, source: 'cgroup v2', file: '/sys/fs/cgroup/memory.max', usageFile: '/sys/fs/cgroup/memory.current' })
})

t.test('cgroup v2: "max" everywhere is no limit', async (t) => {
  const read = files({ '/proc/self/cgroup': '0::/a\n', '/sys/fs/cgroup/a/memory.max': 'max\n' })
  t.same(cgroupMemoryLimit(read), { bytes: 0, source: 'none' })
})

t.test('a parent\'s smaller limit bounds the group (a pod\'s group around its container)', async (t) => {
  const read = files({
    '/proc/self/cgroup': '0::/kubepods/pod1/abc\n',
    '/sys/fs/cgroup/kubepods/pod1/abc/memory.max': 'max\n',
    '/sys/fs/cgroup/kubepods/pod1/memory.max': '201326592\n',
    '/sys/fs/cgroup/kubepods/memory.max': '25769803776\n'
  })
  t.same(cgroupMemoryLimit(read), { bytes: 192 * MiB, source: 'cgroup v2', file: '/sys/fs/cgroup/kubepods/pod1/memory.max', usageFile: '/sys/fs/cgroup/kubepods/pod1/memory.current' })
})

t.test('cgroup v1: memory.limit_in_bytes of the memory group', async (t) => {
  const read = files({
    '/proc/self/cgroup': V1_PROC,
    '/sys/fs/cgroup/memory/user.slice/session-1.scope/memory.limit_in_bytes': '134217728\n',
    '/sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes': '9223372036854771712\n',
    '/sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712\n'
  })
  t.same(cgroupMemoryLimit(read),
    { bytes: 128 * MiB, source: 'cgroup v1', file: '/sys/fs/cgroup/memory/user.slice/session-1.scope/memory.limit_in_bytes', usageFile: '/sys/fs/cgroup/memory/user.slice/session-1.scope/memory.usage_in_bytes' },
    'the v2 line of a hybrid layout has no memory.max: v1 answers')
})

t.test('cgroup v1 without a cgroup namespace: the host\'s path is missing, the mount\'s root is the container', async (t) => {
  const read = files({
    '/proc/self/cgroup': '4:memory:/docker/0123abcd\n',
    '/sys/fs/cgroup/memory/memory.limit_in_bytes': '268435456\n'
  })
  t.same(cgroupMemoryLimit(read), { bytes: 256 * MiB, source: 'cgroup v1', file: '/sys/fs/cgroup/memory/memory.limit_in_bytes', usageFile: '/sys/fs/cgroup/memory/memory.usage_in_bytes' })
})

t.test('no /proc/self/cgroup (not Linux), or an unlimited v1 group: no limit', async (t) => {
  t.same(cgroupMemoryLimit(files({})), { bytes: 0, source: 'none' })
  t.same(cgroupMemoryLimit(files({ '/proc/self/cgroup': V1_PROC, '/sys/fs/cgroup/memory/memory.limit_in_bytes': '9223372036854771712' })),
    { bytes: 0, source: 'none' })
})

t.test('the usage counter beside the limit: its bytes, or undefined when unreadable', async (t) => {
  const read = files({ '/u': '100663296\n', '/bad': 'max\n' })
  t.equal(readUsageBytes(read, '/u'), 96 * MiB)
  t.equal(readUsageBytes(read, '/bad'), undefined)
  t.equal(readUsageBytes(read, '/missing'), undefined)
})

t.test('private memory: RssAnon from /proc/self/status, in bytes; undefined where the field or the file is missing', async (t) => {
  const status = 'Name:\tnode\nVmRSS:\t  190000 kB\nRssAnon:\t   98304 kB\nRssFile:\t   91696 kB\n'
  t.equal(readPrivateBytes(files({ '/proc/self/status': status })), 96 * MiB)
  t.equal(readPrivateBytes(files({ '/proc/self/status': 'Name:\tnode\nVmRSS:\t  190000 kB\n' })), undefined, 'no RssAnon line (Linux before 4.5)')
  t.equal(readPrivateBytes(files({})), undefined, 'no /proc (not Linux)')
  const own = readPrivateBytes()
  t.ok(own !== undefined && own > MiB && own < process.memoryUsage().rss, 'this process\'s: some, and less than its RSS')
})

t.test('MEMORY_LIMIT_BYTES overrides the cgroup below its limit, 0 included (the memory watch off)', async (t) => {
  const read = files({ '/proc/self/cgroup': V2_PROC, '/sys/fs/cgroup/memory.max': '134217728' })
  const cgroup = { bytes: 128 * MiB, source: 'cgroup v2', file: '/sys/fs/cgroup/memory.max', usageFile: '/sys/fs/cgroup/memory.current' }
  t.same(memoryLimit(undefined, read), cgroup)
  t.same(memoryLimit(96 * MiB, read), { bytes: 96 * MiB, source: 'MEMORY_LIMIT_BYTES' })
  t.same(memoryLimit(128 * MiB, read), { bytes: 128 * MiB, source: 'MEMORY_LIMIT_BYTES' })
  t.same(memoryLimit(0, read), { bytes: 0, source: 'MEMORY_LIMIT_BYTES' })
  t.same(memoryLimitWarnings(memoryLimit(96 * MiB, read)), [], 'no warning below it')
})

t.test('MEMORY_LIMIT_BYTES above the cgroup\'s limit: the cgroup\'s is taken, with a warning', async (t) => {
  // 1 GiB in a 128 MiB group: the heads bound and the waters derived from 1 GiB, OOM-killed under 2,000 slow heads.
  const read = files({ '/proc/self/cgroup': V2_PROC, '/sys/fs/cgroup/memory.max': '134217728' })
  const limit = memoryLimit(1024 * MiB, read)
  t.same(limit, { bytes: 128 * MiB, source: 'cgroup v2', file: '/sys/fs/cgroup/memory.max', usageFile: '/sys/fs/cgroup/memory.current', settingAbove: 1024 * MiB })
  t.same(memoryLimitWarnings(limit), [`MEMORY_LIMIT_BYTES ${1024 * MiB} is above the cgroup v2 limit of ${128 * MiB} bytes (/sys/fs/cgroup/memory.max), where the kernel kills the process: the cgroup's limit is used; lower MEMORY_LIMIT_BYTES or unset it`])
  t.same(memoryLimit(1024 * MiB, files({ '/proc/self/cgroup': V2_PROC, '/sys/fs/cgroup/memory.max': 'max' })), { bytes: 1024 * MiB, source: 'MEMORY_LIMIT_BYTES' }, 'no cgroup limit: the setting')
})

t.test('the settings: MEMORY_LIMIT_BYTES 0 or at least 32 MiB; MAX_IN_FLIGHT_REQUESTS 500 by default, 0 for no cap', async (t) => {
  const env = { AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
  const defaults = loadConfig(env)
  t.equal(defaults.overload.memoryLimitBytes, undefined, 'unset: the cgroup\'s')
  t.equal(defaults.overload.maxInFlightRequests, 500)
  t.equal(loadConfig({ ...env, MEMORY_LIMIT_BYTES: '0', MAX_IN_FLIGHT_REQUESTS: '0' }).overload.maxInFlightRequests, 0)
  t.equal(loadConfig({ ...env, MEMORY_LIMIT_BYTES: String(32 * MiB) }).overload.memoryLimitBytes, 32 * MiB)
  t.throws(() => loadConfig({ ...env, MEMORY_LIMIT_BYTES: String(32 * MiB - 1) }), new ConfigError([
    'MEMORY_LIMIT_BYTES: must be 0 (no limit) or at least 33554432 (32 MiB): below it the sidecar would shed every request']))
  t.throws(() => loadConfig({ ...env, MAX_IN_FLIGHT_REQUESTS: '-1' }), ConfigError)
})
